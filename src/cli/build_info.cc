#include "cli/build_info.h"

#include "gem_build_commit.h"

namespace gem::cli {

const char* build_commit() { return GEM_GIT_COMMIT; }

}  // namespace gem::cli
