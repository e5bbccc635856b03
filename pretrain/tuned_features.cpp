#include "pretrain/tuned_features.hpp"

#include "gpu/check.hpp"
#include "models/dense.hpp"
#include "models/diffusion/denoiser.hpp"
#include "pretrain/diffusion_feature_extractor.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/model_factory.hpp"
#include "pretrain/window_feature_extractor.hpp"

namespace foxhunt::pretrain {

std::unique_ptr<rl::TrainableObsFeatures> make_tuned_features(const FeatureSource& source, FeatureOutput output,
                                                              const rl::MarketConfig& market, std::int64_t num_envs,
                                                              std::int64_t max_train_rows, std::int64_t noise_step,
                                                              cudaStream_t stream) {
  FH_EXPECT(max_train_rows >= 1, "make_tuned_features: max_train_rows must be >= 1");
  if (source.diffusion())
    return std::make_unique<TunedDiffusionFeatureExtractor>(source, output, market, num_envs, max_train_rows,
                                                            noise_step, stream);
  return std::make_unique<WindowFeatureExtractor>(source, output, market, num_envs, max_train_rows, stream);
}

std::size_t tuned_features_bytes(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                                 std::int64_t num_envs, std::int64_t max_train_rows) {
  if (source.diffusion())
    return DiffusionFeatureExtractor::bytes_for(source, output, market, num_envs, max_train_rows);
  return WindowFeatureExtractor::bytes_for(source, output, market, num_envs, max_train_rows);
}

void declare_tuned_parameters(const FeatureSource& source, const rl::MarketConfig& market, gpu::ParameterArena& arena) {
  if (source.diffusion()) {
    // The denoiser as DiffusionFeatureExtractor builds it (its trainer's spec).
    models::Denoiser(diffusion_trainer_spec(source.config, market.assets).denoiser).declare(arena);
    return;
  }
  ModelSpec spec = source.model;
  spec.sequence_length = market.window;  // the window form (WindowFeatureExtractor)
  make_model(spec)->declare(arena);
  models::DenseSpec hs;
  hs.name = "head";
  hs.in = source.embedding;
  hs.out = source.head_outputs;
  hs.math = source.model.math;
  models::Dense(hs).declare(arena);
}

}  // namespace foxhunt::pretrain
