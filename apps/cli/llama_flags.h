#pragma once
// llama.cpp's spellings of the options (llama-cli, llama-server): the one table that maps them onto
// vkspec's. CLI11 reads a multi-letter short flag (-ngl) as a bundle of one-letter ones, so they are
// translated before it parses: renamed to vkspec's option, accepted and ignored where vkspec always does
// what they ask (-ngl 99: every layer on the device), or refused with one line that says why (-hf).
#include <string>
#include <vector>

namespace vkspec::cli {

// args without the program name; notes (one line per ignored flag) are appended to *notes. Throws
// cli::Error for a flag that cannot apply or lacks its value.
std::vector<std::string> translate_llama_flags(std::vector<std::string> args, std::vector<std::string>* notes);

}  // namespace vkspec::cli
