// dtrun's version and the commit it was built from (`dtrun --version`).
#pragma once

#include <string>

namespace dtrun::launcher {

/// "dtrun 0.1.0 (commit 357d9cc2f1ab)": the project version and `git describe` of the sources
/// at build time ("unknown" outside a git checkout). Pure.
std::string versionText();

}  // namespace dtrun::launcher
