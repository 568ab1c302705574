#include "launcher/version.h"

#include "dtrun_version.h"  // generated at build time (cmake/version.cmake)

namespace dtrun::launcher {

std::string versionText() {
  return std::string("dtrun ") + DTRUN_VERSION + " (commit " + DTRUN_COMMIT + ")";
}

}  // namespace dtrun::launcher
