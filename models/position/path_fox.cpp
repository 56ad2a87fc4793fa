// path_fox: PaTH plus the FoX forget gate, logits scale·q_iᵀ H_i⋯H_{j+1} k_j + (G_i − G_j),
// the gate term unscaled as in fox.
#include "models/position/path.h"

namespace pb {
namespace {

template <class E>
struct PathFox : Path<E> {
  explicit PathFox(const Spec& s) : Path<E>(s, true) {}
};

}  // namespace

EncodingEntry path_fox_encoding() {
  return make_entry<PathFox>(path_schema("path_fox", "PaTH with the FoX forget gate"),
                             path_info("path_fox", true, {"#cc79a7", 6, 0}));  // hexagon
}

}  // namespace pb
