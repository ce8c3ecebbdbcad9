// The build's identity: version and the commit the binary was built from (generated at build
// time by cmake/BuildCommit.cmake).
#pragma once

namespace gem::cli {

// "gem VERSION" and the short commit, "-dirty" when built from uncommitted changes.
const char* build_commit();

}  // namespace gem::cli
