// The console's languages: English (default) and Russian. Texts live in
// i18n/en.js and i18n/ru.js; numbers, dates and plural forms follow the
// language through Intl.
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import en from "./i18n/en.js";
import ru from "./i18n/ru.js";

export const dictionaries = { en, ru };

export const LangContext = createContext({ lang: "en", setLang: () => {} });

// format replaces {name} placeholders.
export function format(s, vars) {
  if (!vars) return s;
  return s.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? String(vars[k]) : "{" + k + "}"));
}

// translator returns the translation function of lang: t(key, vars) looks
// the key up (a key missing in Russian falls back to English, a key missing
// everywhere shows itself); t.n(key, n, vars) picks the plural form of n
// (key.one, key.few, key.many, key.other: Intl.PluralRules); t.lang is the
// language.
export function translator(lang) {
  const dict = dictionaries[lang] || en;
  const rules = new Intl.PluralRules(lang);
  const t = (key, vars) => format(dict[key] ?? en[key] ?? key, vars);
  t.n = (key, n, vars) => {
    const form = key + "." + rules.select(n);
    const s = dict[form] ?? dict[key + ".other"] ?? en[key + "." + new Intl.PluralRules("en").select(n)] ?? key;
    return format(s, { n, ...vars });
  };
  t.lang = lang;
  return t;
}

const cache = {};

// useT returns the translation function of the current language.
export function useT() {
  const { lang } = useContext(LangContext);
  cache[lang] = cache[lang] || translator(lang);
  return cache[lang];
}
