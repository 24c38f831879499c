#pragma once
// JSON Schema -> GBNF (constrain/gbnf.h), for structured outputs (OpenAI's response_format json_schema,
// llama.cpp's json_schema, `vkspec run -j`): every text the grammar allows is a JSON value the schema accepts,
// in json.gbnf's layout (constrain/json_grammar.h: bounded whitespace). Supported: type (one or a list), object
// properties and required (other properties are never generated; optional ones follow the required ones),
// array items and prefixItems, minItems and maxItems, string minLength and maxLength, pattern and format
// (constrain/json_pattern.h; with length bounds only where they do not cut into the pattern's own lengths),
// integer minimum and maximum (and their exclusive forms; digit by digit, so exactly the range), enum, const,
// anyOf, oneOf whose branches no value can match twice (types, consts, or a required property whose const
// differs), allOf over object schemas (merged), $ref to #/$defs or #/definitions (recursion allowed), {} and
// true for any value; annotations (title, description, default, examples, $schema, $id,
// additionalProperties, strict, discriminator, ...) are ignored. A keyword that would constrain values in a
// way the grammar cannot (not, minimum on numbers, uniqueItems, oneOf branches that may overlap, ...) is
// refused with an Error naming it, never ignored.
#include <string>

#include <nlohmann/json.hpp>

namespace vkspec {

// (ordered_json: properties keep the schema's order)
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

}  // namespace vkspec
