#include "runners/build_info.h"

#include <string>

#include "git_commit.h"

namespace pb {

nlohmann::json build_stamp() {
  return {{"pathbench_version", PATHBENCH_VERSION}, {"commit", PATHBENCH_GIT_COMMIT}, {"sources", std::string(kSourcesDigest)}};
}

}  // namespace pb
