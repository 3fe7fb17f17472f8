// Built-in config.json presets for make-model. mini and small are the shapes the performance
// comparisons use (issue: foundation): keep them exactly so.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mlaserve {

// The presets' names, as help and errors list them: "tiny | mini | small | ...".
extern const char* const kModelPresetNames;
nlohmann::json model_preset(const std::string& name);  // one of kModelPresetNames

// make-model --override: each key merged (JSON merge patch) where it lives in `config`: at its
// top level, or in text_config (Kimi K3 keeps the text model's keys there), or both where both
// have it; an object merged into an object is checked the same way, key by key. A key the
// config does not have is an error naming it, so a misspelt or misplaced key is not ignored.
nlohmann::json apply_overrides(nlohmann::json config, const nlohmann::json& overrides);

}  // namespace mlaserve
