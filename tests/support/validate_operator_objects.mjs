// The Prometheus operator's objects (monitoring.coreos.com/v1) validated by the ajv validators of
// @kubernetes-models/prometheus-operator, generated from the operator's API types. Run by
// tests/support/prometheus_operator.py: argv[2] is the package's folder; stdin, a JSON array of
// objects; stdout, a JSON array of the same length, each the list of what is wrong with that
// object (empty when it validates). Anything else (a kind the package lacks, a crash) exits 1.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const packageDir = process.argv[2];
let input = "";
for await (const chunk of process.stdin) input += chunk;

const results = [];
for (const obj of JSON.parse(input)) {
  if (obj.apiVersion !== "monitoring.coreos.com/v1" || !/^[A-Z][A-Za-z]+$/.test(obj.kind ?? "")) {
    throw new Error(`not a monitoring.coreos.com/v1 object: ${obj.apiVersion} ${obj.kind}`);
  }
  // The package's export "./monitoring.coreos.com/v1/*", by file: this script is not inside it.
  const module = await import(pathToFileURL(join(packageDir, "monitoring.coreos.com", "v1", `${obj.kind}.js`)));
  try {
    new module[obj.kind](obj).validate();
    results.push([]);
  } catch (err) {
    // ajv's ValidationError, by its fields (not its message): anything else is a crash.
    if (err?.validation !== true || !Array.isArray(err.errors)) throw err;
    results.push(err.errors.map((e) => ({ path: e.instancePath, keyword: e.keyword, message: e.message })));
  }
}
process.stdout.write(JSON.stringify(results));
