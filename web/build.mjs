// Builds the console into ../console/ui (embedded into the eventforge
// binary). The output is committed; `make web-check` rebuilds it and fails
// if it differs. esbuild's output is deterministic for a pinned version.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "console", "ui");

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

await build({
  entryPoints: { app: join(here, "src", "main.jsx") },
  outdir: out,
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020"],
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});
copyFileSync(join(here, "index.html"), join(out, "index.html"));
console.log("console assets written to", out);
