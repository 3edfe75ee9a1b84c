// Prints the gzip size of what each page loads up front (its script, the chunks it preloads and
// its stylesheet) and of the whole build. `npm run size` after `npm run build`.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { gzipSync } from "node:zlib";

const dist = resolve(import.meta.dirname, "../../src/outlive/web/dist");
const gz = (file) => gzipSync(readFileSync(file), { level: 9 }).length;
const kb = (n) => `${(n / 1024).toFixed(1)} kB`;

function upFront(page) {
  const html = readFileSync(join(dist, page), "utf8");
  const files = [...html.matchAll(/(?:src|href)="\/(assets\/[^"]+\.(?:js|css))"/g)].map((m) => m[1]);
  return files.map((f) => ({ file: f, raw: statSync(join(dist, f)).size, gzip: gz(join(dist, f)) }));
}

const rows = [];
for (const page of ["index.html", "graphiql.html"]) {
  const files = upFront(page);
  const raw = files.reduce((n, f) => n + f.raw, 0);
  const gzip = files.reduce((n, f) => n + f.gzip, 0);
  rows.push([page === "index.html" ? "app (index.html), up front" : "GraphiQL (graphiql.html), up front", raw, gzip]);
  for (const f of files) console.error(`  ${page}: ${f.file} ${kb(f.raw)} -> ${kb(f.gzip)} gzip`);
}
const assets = readdirSync(join(dist, "assets")).map((f) => join(dist, "assets", f));
rows.push([
  "whole build (GraphiQL's editor and workers load on demand)",
  assets.reduce((n, f) => n + statSync(f).size, 0),
  assets.reduce((n, f) => n + gz(f), 0),
]);
console.log("| what | raw | gzip |\n|---|---:|---:|");
for (const [what, raw, gzip] of rows) console.log(`| ${what} | ${kb(raw)} | ${kb(gzip)} |`);
