// Validates an OpenAPI (Swagger 2.0) document with @apidevtools/swagger-parser:
// the official JSON Schema of the specification plus its semantic checks
// (unique operation IDs, path parameters declared, $refs resolvable).
// Usage: node validate.mjs FILE. Exit 0 and "valid" on success; exit 1 and
// the validator's message otherwise.
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs FILE");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  const ops = Object.values(api.paths).reduce((n, p) => n + Object.keys(p).length, 0);
  console.log(`valid: ${api.info.title} ${api.info.version}, swagger ${api.swagger}, ${Object.keys(api.paths).length} paths, ${ops} operations`);
} catch (err) {
  console.error(`invalid: ${err.message}`);
  process.exit(1);
}
