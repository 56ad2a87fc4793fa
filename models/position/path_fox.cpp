// path_fox: PaTH plus the FoX forget gate, logits scale·q_iᵀ H_i⋯H_{j+1} k_j + (G_i − G_j),
// the gate term unscaled as in fox; gate_scale=1 scales it too, as FLA's PaTH layer does;
// gate_bias as in fox.
#include <utility>

#include "models/position/path.h"

namespace pb {
namespace {

template <class E>
struct PathFox : Path<E> {
  explicit PathFox(const Spec& s) : Path<E>(s, true) {}
};

}  // namespace

EncodingEntry path_fox_encoding() {
  Schema schema = path_schema("path_fox", "PaTH with the FoX forget gate");
  schema.params.push_back({"gate_scale", ParamType::Int, "0",
                           "1: the gate scaled with the logit, scale·(q·k + G_i − G_j) (FLA); 0: unscaled (FoX)",
                           {}, true});
  schema.params.push_back(gate_bias_key());
  return make_entry<PathFox>(std::move(schema), path_info("path_fox", true, {"#cc79a7", 6, 0}));  // hexagon
}

}  // namespace pb
