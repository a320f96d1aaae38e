// Copies the third-party files /docs and /redoc load from node_modules into the
// Python package, with their licences, and writes VENDORED.json (each package's
// version; each file's SHA-256 as npm has it and as the package ships it). Files are
// copied unchanged but for PATCHES. `npm run vendor -- --check` changes nothing and
// fails if the package's copies are not what node_modules (and PATCHES) make.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, basename } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "..", "node_modules");
const target = join(here, "..", "..", "src", "taskservice", "api", "static", "vendor");

// package → the files taken from it (paths inside the npm package).
const FILES = {
  "swagger-ui-dist": [
    "swagger-ui-bundle.js",
    "swagger-ui.css",
    "favicon-32x32.png",
    "LICENSE",
    "NOTICE",
    "swagger-ui-bundle.js.LICENSE.txt",
  ],
  redoc: ["bundles/redoc.standalone.js", "LICENSE", "bundles/redoc.standalone.js.LICENSE.txt"],
};

// file → replacements, each of a string that must occur exactly once (an upgrade
// that moves it fails here, to be looked at again).
const PATCHES = {
  "redoc/bundles/redoc.standalone.js": [
    {
      // The sidebar's "API docs by Redocly" link draws a logo fetched from Redocly's
      // CDN on every page view (with no option to turn it off): none is fetched; an
      // image that fails to load is hidden by Redoc itself (its onError).
      find: '"https://cdn.redoc.ly/redoc/logo-mini.svg"',
      replace: '"data:,"',
    },
  ],
};

function patched(key, bytes) {
  const patches = PATCHES[key];
  if (!patches) return bytes;
  let text = bytes.toString("utf8");
  for (const { find, replace } of patches) {
    const count = text.split(find).length - 1;
    if (count !== 1) {
      console.error(`${key}: ${JSON.stringify(find)} occurs ${count} times, not once`);
      process.exit(1);
    }
    text = text.replace(find, () => replace);
  }
  return Buffer.from(text, "utf8");
}

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");
const check = process.argv.includes("--check");
const manifest = {};
const stale = [];

for (const [name, files] of Object.entries(FILES)) {
  const root = join(modules, name);
  if (!existsSync(root)) {
    console.error(`no ${root}: run \`npm ci\` in frontend/ first`);
    process.exit(1);
  }
  const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const folder = join(target, name);
  if (!check) {
    rmSync(folder, { recursive: true, force: true }); // no file left from an older version
    mkdirSync(folder, { recursive: true });
  }
  manifest[name] = { version, files: {} };
  for (const file of files) {
    const source = join(root, file);
    const copy = join(folder, basename(file));
    const original = readFileSync(source);
    const bytes = patched(`${name}/${file}`, original);
    const entry = { from: file, sha256: sha256(bytes) };
    if (bytes !== original) entry.patched = { npm_sha256: sha256(original) };
    manifest[name].files[basename(file)] = entry;
    if (check) {
      if (!existsSync(copy) || sha256(readFileSync(copy)) !== entry.sha256) stale.push(copy);
    } else {
      writeFileSync(copy, bytes);
    }
  }
}

const manifestPath = join(target, "VENDORED.json");
const written = JSON.stringify(manifest, null, 2) + "\n";
if (check) {
  if (!existsSync(manifestPath) || readFileSync(manifestPath, "utf8") !== written) {
    stale.push(manifestPath);
  }
  if (stale.length) {
    console.error(`not what node_modules holds (run \`npm run vendor\`):\n  ${stale.join("\n  ")}`);
    process.exit(1);
  }
  console.log("the vendored files are what node_modules and PATCHES make");
} else {
  writeFileSync(manifestPath, written);
  for (const [name, { version }] of Object.entries(manifest)) {
    console.log(`${name}@${version} → ${join(target, name)}`);
  }
}
