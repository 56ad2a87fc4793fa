// path: PaTH attention, data-dependent Householder-like transitions (see path.h).
#include "models/position/path.h"

namespace pb {
namespace {

template <class E>
struct PathNoGate : Path<E> {
  explicit PathNoGate(const Spec& s) : Path<E>(s, false) {}
};

}  // namespace

EncodingEntry path_encoding() {
  return make_entry<PathNoGate>(path_schema("path", "PaTH: accumulated Householder transitions"),
                                path_info("path", false, {"#d55e00", 5, 0}));  // pentagon
}

}  // namespace pb
