// Builds the console (frontend/console/src) into the Python package, where the
// service serves it from (`taskservice/ui/`): one ES module bundle and one
// stylesheet, minified, with index.html beside them, and BUILD.json recording the
// SHA-256 of every source file and of every file built, so that a Python test can
// tell a bundle built from other sources than those committed (CI has no Node).
//
//   npm run console              # build
//   npm run console -- --watch   # rebuild on every change
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync, copyFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const frontend = join(here, "..");
const target = join(frontend, "..", "src", "taskservice", "ui");
const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

function files(folder) {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

function manifest() {
  const sources = {};
  for (const path of [...files(join(here, "src")), join(here, "index.html"), join(here, "build.mjs")].sort()) {
    sources[relative(frontend, path)] = sha256(readFileSync(path));
  }
  const lock = JSON.parse(readFileSync(join(frontend, "package-lock.json"), "utf8"));
  const versions = {};
  for (const name of ["preact", "uplot", "esbuild"]) {
    versions[name] = lock.packages[`node_modules/${name}`].version;
  }
  const built = {};
  for (const name of ["index.html", "static/console.js", "static/console.css", "static/LICENSES.txt"]) {
    built[name] = sha256(readFileSync(join(target, name)));
  }
  writeFileSync(join(target, "BUILD.json"), JSON.stringify({ versions, sources, built }, null, 2) + "\n");
}

const options = {
  entryPoints: { console: join(here, "src", "main.jsx") },
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  legalComments: "none", // the libraries' licences are in LICENSES.txt beside it
  jsx: "automatic",
  jsxImportSource: "preact",
  outdir: join(target, "static"),
  logLevel: "info",
};

mkdirSync(join(target, "static"), { recursive: true });
copyFileSync(join(here, "index.html"), join(target, "index.html"));
// The libraries' licences, as the bundle carries their code.
const licences = ["preact", "uplot"].map((name) => {
  const text = readFileSync(join(frontend, "node_modules", name, "LICENSE"), "utf8");
  return `${name}\n${"=".repeat(name.length)}\n\n${text.trim()}\n`;
});
writeFileSync(join(target, "static", "LICENSES.txt"), licences.join("\n"));
if (process.argv.includes("--watch")) {
  const context = await esbuild.context({
    ...options,
    plugins: [{ name: "manifest", setup: (build) => build.onEnd(manifest) }],
  });
  await context.watch();
} else {
  await esbuild.build(options);
  manifest();
}
