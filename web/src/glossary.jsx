import { useEffect } from "preact/hooks";
import { useT } from "./i18n.js";

// TERMS are the glossary's entries, in the order it shows them; a text
// links to one with [[id|words]] (Rich).
export const TERMS = ["lsn", "walsender", "slot", "mark", "failpoint", "outbox", "dlq"];

// termHref is the address of a glossary entry ("glossary": the page).
export function termHref(id) {
  return id === "glossary" ? "#/glossary" : "#/glossary/" + id;
}

// Rich renders a text of the bundles: [[term|words]] becomes a link to the
// term's glossary entry, `code` becomes code.
export function Rich({ text }) {
  const parts = [];
  const re = /\[\[([\w-]+)\|([^\]]+)\]\]|`([^`]+)`/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) parts.push(text.slice(last, m.index));
    if (m[1]) {
      parts.push(
        <a class="term" href={termHref(m[1])} data-term={m[1]}>
          {m[2]}
        </a>,
      );
    } else {
      parts.push(<code>{m[3]}</code>);
    }
    last = re.lastIndex;
  }
  if (last < text.length) parts.push(text.slice(last));
  return <>{parts}</>;
}

// Glossary is the view #/glossary; #/glossary/<term> scrolls to the term.
export function Glossary({ term }) {
  const t = useT();
  useEffect(() => {
    if (!term) return;
    const el = document.getElementById("term-" + term);
    if (el) {
      el.scrollIntoView({ block: "start" });
      el.focus({ preventScroll: true });
    }
  }, [term]);
  return (
    <div class="view">
      <p class="intro">{t("glossary.intro")}</p>
      <dl class="glossary panel" id="glossary">
        {TERMS.map((id) => (
          <div class={"term-entry" + (term === id ? " current" : "")} id={"term-" + id} tabIndex={-1}>
            <dt>{t("term." + id + ".title")}</dt>
            <dd>
              <Rich text={t("term." + id + ".text")} />
            </dd>
          </div>
        ))}
      </dl>
    </div>
  );
}
