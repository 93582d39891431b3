// The man page and shell completions, generated from the one definition of
// the command line (BuildApp) by modelgate-docgen at build time.
#pragma once

#include <string>

#include "app.h"

namespace modelgate::cli {

// RenderManPage is modelgate(1) in man(7) roff: every command with its
// synopsis, description and options (help text and default).
std::string RenderManPage(const AppDefinition& def);
// RenderBashCompletion is a bash completion script for `modelgate`:
// commands, each command's options, option values (choices, files, dirs).
std::string RenderBashCompletion(const AppDefinition& def);
// RenderZshCompletion is the zsh completion function `_modelgate`.
std::string RenderZshCompletion(const AppDefinition& def);
// RenderDefinitionsJson dumps the definitions themselves (commands, their
// options' names, type, help, default, choices) for tests that check the
// generated files and --help against them.
std::string RenderDefinitionsJson(const AppDefinition& def);

}  // namespace modelgate::cli
