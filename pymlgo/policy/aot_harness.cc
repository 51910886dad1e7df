// Runs a model compiled by `saved_model_cli aot_compile_cpu` the way LLVM's
// ReleaseModeModelRunner does: every input buffer is found by "feed_" + feature name,
// the decision by "fetch_inlining_decision", read as int64 after Run().
//
// Built by pymlgo.policy.aot with -DMODEL_HEADER="<prefix>.h" -DMODEL_CLASS=<cpp_class>.
// stdin: one line of feature names, then one line of int64 values per call site.
// stdout: the compiled class's interface ("arg NAME BYTES", "result NAME BYTES",
// "selector INDEX"), a line "rows", then per call site the decision and, when the model
// has a `fetch_logit` result (a diagnostic export), the logit.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include MODEL_HEADER

int main() {
  MODEL_CLASS model;
  for (size_t i = 0; i < MODEL_CLASS::kNumArgs; ++i)
    std::printf("arg %s %d\n", model.GetArgName(static_cast<int>(i)),
                model.arg_size(static_cast<int>(i)));
  for (size_t i = 0; i < MODEL_CLASS::kNumResults; ++i)
    std::printf("result %s %d\n", model.GetResultName(static_cast<int>(i)),
                model.result_size(static_cast<int>(i)));
  // LLVM refuses a model with this input unless the user names a sub-model.
  std::printf("selector %d\n", model.LookupArgIndex("feed_model_selector"));

  const int decision = model.LookupResultIndex("fetch_inlining_decision");
  const int logit = model.LookupResultIndex("fetch_logit");
  if (decision < 0) {
    std::fprintf(stderr, "the model has no fetch_inlining_decision result\n");
    return 3;
  }
  std::string line;
  std::getline(std::cin, line);
  std::istringstream names(line);
  std::vector<int> index;  // -1: LLVM would give it a scratch buffer the model never reads
  for (std::string name; names >> name;) index.push_back(model.LookupArgIndex("feed_" + name));
  std::printf("rows\n");
  while (std::getline(std::cin, line)) {
    std::istringstream row(line);
    for (int idx : index) {
      int64_t value = 0;
      if (!(row >> value)) {
        std::fprintf(stderr, "a row has fewer values than there are names\n");
        return 4;
      }
      if (idx >= 0) *static_cast<int64_t*>(model.arg_data(idx)) = value;
    }
    if (!model.Run()) {
      std::fprintf(stderr, "Run() failed\n");
      return 5;
    }
    const int64_t d = *static_cast<const int64_t*>(model.result_data(decision));
    if (logit >= 0)
      std::printf("%" PRId64 " %.9g\n", d,
                  static_cast<double>(*static_cast<const float*>(model.result_data(logit))));
    else
      std::printf("%" PRId64 "\n", d);
  }
  return 0;
}
