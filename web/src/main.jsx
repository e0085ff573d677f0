import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import "uplot/dist/uPlot.min.css";
import "./style.css";
import { LangContext, useT } from "./i18n.js";
import { getToken, setToken } from "./api.js";
import { DeliveryPath } from "./path.jsx";
import { Drills } from "./drills.jsx";
import { Operations } from "./ops.jsx";
import { Glossary } from "./glossary.jsx";

const VIEWS = [
  { id: "path", label: "nav.path" },
  { id: "drills", label: "nav.drills" },
  { id: "ops", label: "nav.ops" },
  { id: "glossary", label: "nav.glossary" },
];

// currentView reads the view and its argument from the address:
// #/<view>[/<arg>], e.g. #/glossary/lsn.
function currentView() {
  const [id, arg] = location.hash.replace(/^#\/?/, "").split("/");
  return VIEWS.some((v) => v.id === id) ? { id, arg: arg || "" } : { id: "path", arg: "" };
}

// TokenPrompt asks for the ops bearer token after a 401.
function TokenPrompt({ onSaved, refused }) {
  const t = useT();
  const [value, setValue] = useState(getToken());
  return (
    <form
      class="token"
      role="alert"
      onSubmit={(e) => {
        e.preventDefault();
        setToken(value.trim());
        onSaved();
      }}
    >
      <strong>{t("token.title")}</strong>
      {refused && getToken() && <span class="muted">{t("token.wrong")}</span>}
      <label>
        {t("token.label")}
        <input type="password" id="ops-token" autocomplete="off" value={value} onInput={(e) => setValue(e.currentTarget.value)} />
      </label>
      <button type="submit" class="primary">{t("token.save")}</button>
    </form>
  );
}

function Shell() {
  const t = useT();
  const [route, setRoute] = useState(currentView());
  const view = route.id;
  const [needToken, setNeedToken] = useState(false);
  const [authEpoch, setAuthEpoch] = useState(0);
  useEffect(() => {
    const onHash = () => setRoute(currentView());
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);
  const auth = {
    unauthorized: () => setNeedToken(true),
    epoch: authEpoch,
  };
  return (
    <div class="shell">
      <header class="top">
        <div class="brand">
          <span class="logo" aria-hidden="true">EF</span>
          <div>
            <h1>{t("app.title")}</h1>
            <p class="subtitle">{t("app.subtitle")}</p>
          </div>
        </div>
        <LangToggle />
      </header>
      <nav class="tabs" aria-label={t("app.title")}>
        {VIEWS.map((v) => (
          <a href={"#/" + v.id} id={"tab-" + v.id} aria-current={view === v.id ? "page" : undefined} class={view === v.id ? "tab active" : "tab"}>
            {t(v.label)}
          </a>
        ))}
      </nav>
      {needToken && (
        <TokenPrompt
          refused={authEpoch > 0}
          onSaved={() => {
            setNeedToken(false);
            setAuthEpoch(authEpoch + 1);
          }}
        />
      )}
      <main id="main" tabIndex={-1}>
        {view === "path" && <DeliveryPath auth={auth} />}
        {view === "drills" && <Drills auth={auth} />}
        {view === "ops" && <Operations auth={auth} />}
        {view === "glossary" && <Glossary term={route.arg} />}
      </main>
    </div>
  );
}

function LangToggle() {
  const t = useT();
  return (
    <LangContext.Consumer>
      {({ lang, setLang }) => (
        <button type="button" class="lang" id="lang-toggle" aria-label={t("lang.toggleLabel")} onClick={() => setLang(lang === "en" ? "ru" : "en")}>
          <span aria-hidden="true">{lang === "en" ? "RU" : "EN"}</span> {t("lang.toggle")}
        </button>
      )}
    </LangContext.Consumer>
  );
}

function App() {
  const [lang, setLangState] = useState(localStorage.getItem("eventforge.lang") === "ru" ? "ru" : "en");
  const setLang = (l) => {
    localStorage.setItem("eventforge.lang", l);
    setLangState(l);
  };
  useEffect(() => {
    document.documentElement.lang = lang;
  }, [lang]);
  return (
    <LangContext.Provider value={{ lang, setLang }}>
      <Shell />
    </LangContext.Provider>
  );
}

render(<App />, document.getElementById("app"));
