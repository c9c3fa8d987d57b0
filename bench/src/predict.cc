#include "commkit/bench/predict.h"

#include "commkit/common/strings.h"
#include "commkit/topology/cost_model.h"

namespace commkit::bench {

PredictionModel MakePredictionModel(bool measure) {
  topology::HostProfileOptions options;
  options.measure = measure;
  options.memcpy_bytes = 16 << 20;
  options.stream_bytes = 16 << 20;
  options.pingpongs = 100;
  options.time_limit_s = 1;
  topology::HostProfile p = topology::ProbeHostProfile(options);
  PredictionModel m;
  m.memcpy_Bps = p.memcpy_Bps;
  m.loopback_alpha_s = p.loopback_alpha_s;
  m.loopback_beta_Bps = p.loopback_beta_Bps;
  m.description = StrCat("topology cost model (ring / recursive doubling, the faster): shared memory 1 us and ",
                         p.memcpy_Bps / 2e9, " GB/s (memcpy/2), TCP loopback ", p.loopback_alpha_s * 1e6, " us and ",
                         p.loopback_beta_Bps / 1e9, " GB/s for gloo; ", Join(p.notes, "; "));
  return m;
}

std::optional<AllreducePrediction> PredictAllreduce(const PredictionModel& model, std::string_view backend, int nranks,
                                                    std::size_t bytes) {
  if (nranks < 1) return std::nullopt;
  topology::HostProfile profile;
  profile.memcpy_Bps = model.memcpy_Bps;
  profile.loopback_alpha_s = model.loopback_alpha_s;
  profile.loopback_beta_Bps = model.loopback_beta_Bps;
  const bool tcp = backend == "gloo" || backend == "raw-gloo";
  auto cost = topology::CostModel::Create(topology::HostShape(profile, nranks, tcp));
  if (!cost.ok()) return std::nullopt;
  const topology::Prediction p = cost->Best(static_cast<double>(bytes));
  return AllreducePrediction{p.busbw_Bps / 1e9, std::string(topology::ToString(p.algorithm))};
}

void AddPredictions(const PredictionModel& model, std::vector<ResultRow>& rows) {
  for (ResultRow& row : rows) {
    if (row.collective != BenchCollective::kAllreduce) continue;
    if (auto p = PredictAllreduce(model, row.backend, row.nranks, row.bytes)) {
      row.pred_busbw_gbps = p->busbw_gbps;
      row.pred_algorithm = p->algorithm;
    }
  }
}

}  // namespace commkit::bench
