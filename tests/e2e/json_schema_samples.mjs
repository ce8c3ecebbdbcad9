// The JSON Schema compiler against an independent validator: for each schema below, hundreds of
// random walks through gem's byte-level matcher (tests/chat/json_schema_sampler, which also fails
// on any state whose shortest completion the matcher refuses) must parse and validate with Ajv and
// ajv-formats ("full" formats); each bad schema must be refused naming its path and keyword.
//   node json_schema_samples.mjs path/to/json_schema_sampler
import Ajv from "ajv";
import addFormats from "ajv-formats";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const sampler = process.argv[2];
const dir = mkdtempSync(join(tmpdir(), "gem-schema-"));
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

const good = {
  int_range: { type: "integer", minimum: -5, maximum: 120 },
  int_exclusive: { type: "integer", exclusiveMinimum: 9, exclusiveMaximum: 1000 },
  int_negative: { type: "integer", minimum: -1234567, maximum: -1000 },
  int_big: { type: "integer", minimum: 99999999999990, maximum: 100000000000010 },
  number_range: { type: "number", exclusiveMinimum: 0.1, maximum: 2.5 },
  number_fraction: { type: "number", minimum: -0.0005, exclusiveMaximum: 0.0005 },
  number_float_bound: { type: "number", minimum: 1e-7, maximum: 3.14159 },
  integer_fractional_bounds: { type: "integer", minimum: 2.5, maximum: 7.5 },
  number_one_sided: { type: "number", minimum: 100 },
  number_tiny_exclusive: { type: "number", exclusiveMinimum: 0 , maximum: 1e-10 },
  pattern_anchored: { type: "string", pattern: "^[a-z]+-\\d{2,3}$" },
  pattern_search: { type: "string", pattern: "ab|c" },
  pattern_unicode: { type: "string", pattern: "^[α-ω]{2,4}é?$" },
  pattern_dot: { type: "string", pattern: "^.{2,4}$" },
  pattern_negated: { type: "string", pattern: "^[^aeiou\\s]*$", maxLength: 10 },
  pattern_classes: { type: "string", pattern: "^\\w+\\s\\D\\S?[\\d.,]*$" },
  pattern_escapes: { type: "string", pattern: "^\\\\\"\\/\\n\\t[\\x41-\\x43]\\u00e9\\u{1F600}$" },
  pattern_groups: { type: "string", pattern: "^(?:ab|cd)+(?<tail>x?)(e|f){1,2}$" },
  pattern_with_lengths: { type: "string", pattern: "^[a-c]*$", minLength: 3, maxLength: 6 },
  pattern_mid_anchor: { type: "string", pattern: "^a|b$" },
  formats: {
    type: "object",
    properties: {
      date: { type: "string", format: "date" },
      time: { type: "string", format: "time" },
      when: { type: "string", format: "date-time" },
      id: { type: "string", format: "uuid" },
      mail: { type: "string", format: "email" },
      ip: { type: "string", format: "ipv4" },
      link: { type: "string", format: "uri" },
      ip6: { type: "string", format: "ipv6" },
      host: { type: "string", format: "hostname" },
      span: { type: "string", format: "duration" },
    },
    required: ["date", "time", "when", "id", "mail", "ip", "link", "ip6", "host", "span"],
    additionalProperties: false,
  },
  format_and_pattern: { type: "string", format: "date", pattern: "^20" },
  one_of_kinds: {
    oneOf: [
      { type: "object", properties: { kind: { const: "circle" }, r: { type: "number", minimum: 0 } }, required: ["kind", "r"] },
      { type: "object", properties: { kind: { const: "square" }, side: { type: "integer", minimum: 1, maximum: 10 } }, required: ["kind", "side"] },
    ],
  },
  one_of_types: { oneOf: [{ type: "string", maxLength: 3 }, { type: "integer" }, { type: "null" }] },
  one_of_presence: {
    oneOf: [
      { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false },
      { type: "object", properties: { b: { type: "string" } }, required: ["b"], additionalProperties: false },
    ],
  },
  all_of: {
    allOf: [
      { type: "object", properties: { a: { type: "integer", minimum: 3 } }, required: ["a"] },
      { properties: { a: { maximum: 7 }, b: { type: "string", pattern: "^x" } }, required: ["b"] },
      { properties: { b: { maxLength: 5 } } },
    ],
  },
  all_of_with_any: {
    allOf: [{ type: "object", properties: { t: { enum: ["a", "b", "c"] } }, required: ["t"] }],
    anyOf: [{ properties: { t: { const: "a" } } }, { properties: { t: { enum: ["b", "c"] } }, required: ["t"] }],
  },
  ref_siblings: {
    $defs: { base: { type: "object", properties: { id: { type: "integer", minimum: 1 } }, required: ["id"] } },
    $ref: "#/$defs/base",
    properties: { id: { maximum: 5 } },
  },
  tree: {
    $defs: {
      node: {
        type: "object",
        properties: {
          v: { type: "integer", minimum: 0, maximum: 9 },
          kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 3 },
        },
        required: ["v", "kids"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  },
  nested_lists: { type: "array", items: { $ref: "#" } },
  linked_list: {
    definitions: { item: { type: "object", properties: { value: { type: "string", minLength: 1, maxLength: 4 }, next: { anyOf: [{ $ref: "#/definitions/item" }, { type: "null" }] } }, required: ["value", "next"] } },
    $ref: "#/definitions/item",
  },
  lengths: { type: "object", properties: { s: { type: "string", minLength: 2, maxLength: 4 }, l: { type: "array", items: { type: "boolean" }, minItems: 1, maxItems: 2 } }, required: ["s", "l"] },
  enum_filtered: { type: "string", enum: ["a", "bb", "ccc", "dddd"], minLength: 2, maxLength: 3 },
  const_number: { const: 42, minimum: 40 },
  multiple: { type: "integer", multipleOf: 7, minimum: -100, maximum: 1000 },
  multiple_number: { type: "number", multipleOf: 25 },
  multiple_all_of: { allOf: [{ type: "integer", multipleOf: 4 }, { multipleOf: 6, exclusiveMinimum: 0 }] },
};

const bad = {
  unsupported: [{ type: "object", patternProperties: { "^a": {} } }, "schema.patternProperties"],
  fractional_multiple: [{ type: "number", multipleOf: 0.01 }, "schema.multipleOf: only integers from 1 to 1000"],
  not_keyword: [{ properties: { a: { not: { type: "string" } } } }, "schema.properties.a.not"],
  bad_pattern: [{ type: "string", pattern: "(?=a)b" }, "schema.pattern: lookahead"],
  backreference: [{ type: "object", properties: { x: { type: "string", pattern: "(a)\\1" } } }, "schema.properties.x.pattern: backreferences"],
  unknown_format: [{ type: "string", format: "iri" }, "schema.format: the format \"iri\" is not supported"],
  empty_range: [{ type: "integer", minimum: 10, maximum: 5 }, "schema: no integer"],
  bad_minimum: [{ type: "number", minimum: "3" }, "schema.minimum: expected a number"],
  overlapping_one_of: [{ oneOf: [{ type: "string" }, { type: "string", maxLength: 3 }] }, "schema.oneOf: options 0 and 1 may both match"],
  all_of_types: [{ allOf: [{ type: "string" }, { type: "integer" }] }, "schema.allOf: the parts' types exclude each other"],
  all_of_enums: [{ allOf: [{ enum: [1, 2] }, { enum: [3] }] }, "schema.allOf: the parts' enum/const values exclude"],
  self_ref: [{ $ref: "#" }, "$ref cycle"],
  infinite: [{ type: "object", properties: { next: { $ref: "#" } }, required: ["next"] }, "no finite instance"],
  repeat_too_big: [{ type: "string", pattern: "a{2000}" }, "schema.pattern: repetition count 2000 over 1000"],
  too_many_states: [{ type: "string", pattern: "^([a-z]{1000}){5}$" }, "schema.pattern: the pattern needs an automaton of more than 4096 states"],
  too_much_work: [{ type: "string", pattern: "[\\s\\S]{1000}" }, "schema.pattern: building its automaton takes more than"],
  pattern_type: [{ type: "string", pattern: 5 }, "schema.pattern: expected a string, got a number"],
  enum_none_left: [{ enum: ["a", "b"], minLength: 3 }, "schema.enum: no value satisfies"],
};

let n = 0;
let seed = 1;
for (const [name, schema] of Object.entries(good)) {
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(schema));
  let out;
  try {
    out = execFileSync(sampler, [file, "300", String(seed++)], { encoding: "utf8", maxBuffer: 64 << 20 });
  } catch (e) {
    assert.fail(`${name}: the sampler failed (${e.status}): ${e.stdout}`);
  }
  const validate = ajv.compile(schema);
  const lines = out.trim().split("\n");
  assert.equal(lines.length, 300, `${name}: ${lines.length} samples`);
  for (const line of lines) {
    const text = JSON.parse(line);
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      assert.fail(`${name}: not JSON: ${text}`);
    }
    assert.ok(validate(value), `${name}: ${JSON.stringify(validate.errors)} in ${text}`);
    n++;
  }
}
console.log(`ok: ${n} random instances of ${Object.keys(good).length} schemas validate (Ajv, ajv-formats)`);

for (const [name, [schema, want]] of Object.entries(bad)) {
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(schema));
  let out = "";
  let status = 0;
  try {
    out = execFileSync(sampler, [file, "1", "1"], { encoding: "utf8" });
  } catch (e) {
    out = e.stdout;
    status = e.status;
  }
  assert.equal(status, 3, `${name}: expected a refused schema, got exit ${status}: ${out}`);
  assert.ok(out.includes(want), `${name}: expected "${want}" in: ${out}`);
}
console.log(`ok: ${Object.keys(bad).length} bad schemas refused, each naming its path and keyword`);
