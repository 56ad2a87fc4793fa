// How specs are shown in tables and figures, from their text alone: spec_items, the labels that
// keep only the parameters telling specs of one name apart, and the plot style of each series.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/spec.h"
#include "runners/results.h"

TEST_CASE("spec_items: the key=value items of a spec's text, without a schema", "[sweep]") {
  using Items = std::vector<std::pair<std::string, std::string>>;
  CHECK(pb::spec_items("path:w_rank=32,conv=0") == Items{{"w_rank", "32"}, {"conv", "0"}});
  CHECK(pb::spec_items("nope").empty());
  CHECK(pb::spec_items("x:a=1,junk,b=") == Items{{"a", "1"}, {"b", ""}});  // no '=': skipped
  CHECK(pb::spec_items("future_pe:k=v") == Items{{"k", "v"}});              // no schema needed
}

TEST_CASE("labels: a spec's name with only the parameters that tell it apart", "[sweep]") {
  using V = std::vector<std::string>;
  CHECK(pb::labels("pe", V{"rope:base=10000", "path:w_rank=32,block=64"}) == V{"rope", "path"});
  CHECK(pb::labels("pe", V{"path:w_rank=32,block=64", "path:w_rank=32,block=64,conv=0", "path:w_rank=16,block=64",
                           "path_fox:w_rank=32"}) == V{"path:w_rank=32", "path:w_rank=32,conv=0", "path:w_rank=16",
                                                       "path_fox"});
  CHECK(pb::labels("task", V{"flipflop:len=512,p_ignore=0.8", "flipflop:len=1024,p_ignore=0.8"}) ==
        V{"flipflop:len=512", "flipflop:len=1024"});
  CHECK(pb::labels("pe", V{"path", "path:conv=0"}) == V{"path", "path:conv=0"});
  CHECK(pb::labels("pe", V{"rope", "rope:base=500"}) == V{"rope", "rope:base=500"});
  // Labels that would not be distinct (the same items in another order): the values themselves.
  CHECK(pb::labels("pe", V{"rope:a=1,b=2", "rope:b=2,a=1"}) == V{"rope:a=1,b=2", "rope:b=2,a=1"});
  CHECK(pb::labels("lr", V{"0.001", "0.01"}) == V{"0.001", "0.01"});
}

TEST_CASE("plot styles: ablations of one encoding are told apart", "[sweep]") {
  const std::vector<std::string> pes = {"rope:base=10000", "path:w_rank=32", "path:w_rank=32,conv=0",
                                        "path:w_rank=32,beta_max=1"};
  const auto st = pb::encoding_styles(pes);
  REQUIRE(st.size() == 4);
  const pb::EncodingStyle path = pb::encoding_style("path");
  CHECK((st[1].colour == path.colour && st[1].sides == path.sides && st[1].dash.empty()));  // the first keeps it
  CHECK(st[0].colour == pb::encoding_style("rope").colour);
  for (size_t i = 1; i < 4; ++i)
    for (size_t j = i + 1; j < 4; ++j) {
      CHECK(st[i].colour != st[j].colour);
      CHECK(st[i].sides != st[j].sides);
      CHECK(st[i].dash != st[j].dash);
    }
  CHECK(pb::stroke(st[1], 1.5) == "stroke=\"" + path.colour + "\" stroke-width=\"1.5\"");
  CHECK(pb::stroke(st[2], 2) == "stroke=\"" + st[2].colour + "\" stroke-width=\"2\" stroke-dasharray=\"5,3\"");
}
