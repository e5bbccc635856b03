#include "pretrain/frozen_features.hpp"

#include <stdexcept>
#include <string>

#include "pretrain/diffusion_feature_extractor.hpp"
#include "pretrain/feature_extractor.hpp"

namespace foxhunt::pretrain {

std::unique_ptr<rl::ObsFeatures> make_frozen_features(const FeatureSource& source, FeatureOutput output,
                                                      const rl::MarketConfig& market, std::int64_t num_envs,
                                                      std::int64_t noise_step, cudaStream_t stream) {
  if (source.diffusion())
    return std::make_unique<DiffusionFeatureExtractor>(source, output, market, num_envs, noise_step, stream);
  if (const std::string why = feature_output_problem(source, output); !why.empty())
    throw std::invalid_argument("features.output: " + why);
  return std::make_unique<FeatureExtractor>(source, output, market, num_envs, stream);
}

std::size_t frozen_features_bytes(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                                  std::int64_t num_envs) {
  if (source.diffusion()) return DiffusionFeatureExtractor::bytes_for(source, output, market, num_envs, 0);
  return FeatureExtractor::bytes_for(source, output, num_envs);
}

}  // namespace foxhunt::pretrain
