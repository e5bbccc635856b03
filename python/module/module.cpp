// The `foxhunt._foxhunt` extension: market configs, the vectorized market on a device, and device
// arrays crossing into and out of Python through DLPack (python/module/dlpack_abi.hpp) without a
// copy. docs/python.md describes the Python API; python/foxhunt/ wraps this module.
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/error.hpp"
#include "dlpack_abi.hpp"
#include "gpu/device.hpp"
#include "gpu/transfer_audit.hpp"
#include "python/api/market_session.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"

namespace py = pybind11;
namespace dlpack = foxhunt::python::dlpack;
using namespace foxhunt;
using python::DeviceView;
using python::ElementType;
using python::MarketSession;
using python::StreamHandle;

namespace {

// ---- names for messages ---------------------------------------------------------------------
const char* element_name(ElementType t) {
  switch (t) {
    case ElementType::f32:
      return "float32";
    case ElementType::bf16:
      return "bfloat16";
    case ElementType::i32:
      return "int32";
    case ElementType::boolean:
      return "bool";
  }
  return "?";
}

std::string dtype_name(const dlpack::DataType& t) {
  std::string base;
  switch (t.code) {
    case dlpack::kInt:
      base = "int";
      break;
    case dlpack::kUInt:
      base = "uint";
      break;
    case dlpack::kFloat:
      base = "float";
      break;
    case dlpack::kBfloat:
      base = "bfloat";
      break;
    case dlpack::kComplex:
      base = "complex";
      break;
    case dlpack::kBool:
      return "bool";
    default:
      base = "type" + std::to_string(t.code) + "_";
  }
  std::string s = base + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

std::string device_name(int type, int id) {
  switch (type) {
    case dlpack::kCPU:
      return "cpu";
    case dlpack::kCUDA:
      return "cuda:" + std::to_string(id);
    case dlpack::kCUDAHost:
      return "cuda_host (pinned host memory)";
    case dlpack::kCUDAManaged:
      return "cuda_managed:" + std::to_string(id);
    case dlpack::kROCM:
      return "rocm:" + std::to_string(id);
    default:
      return "DLPack device type " + std::to_string(type) + ":" + std::to_string(id);
  }
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::ostringstream o;
  o << '(';
  for (std::size_t k = 0; k < s.size(); ++k) o << (k ? ", " : "") << s[k];
  if (s.size() == 1) o << ',';
  o << ')';
  return o.str();
}

const char* to_name(rl::ActionMode m) { return rl::to_string(m); }

// ---- export: DeviceView -> DLPack capsule ----------------------------------------------------
dlpack::DataType dl_type(ElementType t) {
  switch (t) {
    case ElementType::f32:
      return {dlpack::kFloat, 32, 1};
    case ElementType::bf16:
      return {dlpack::kBfloat, 16, 1};
    case ElementType::i32:
      return {dlpack::kInt, 32, 1};
    case ElementType::boolean:
      return {dlpack::kBool, 8, 1};
  }
  return {dlpack::kFloat, 32, 1};
}

// What an exported tensor owns: the storage (shared), its shape and strides.
template <class Managed>
struct ExportContext {
  std::shared_ptr<void> owner;
  std::vector<std::int64_t> shape, strides;
  Managed managed{};
};

template <class Managed>
void delete_export(Managed* self) {
  delete static_cast<ExportContext<Managed>*>(self->manager_ctx);
}

template <class Managed>
Managed* make_managed(const DeviceView& v) {
  auto* ctx = new ExportContext<Managed>{v.owner, v.shape, std::vector<std::int64_t>(v.shape.size()), Managed{}};
  std::int64_t stride = 1;
  for (std::size_t k = v.shape.size(); k-- > 0;) {
    ctx->strides[k] = stride;
    stride *= v.shape[k];
  }
  dlpack::Tensor& t = ctx->managed.dl_tensor;
  t.data = v.data;
  t.device = {dlpack::kCUDA, v.device};
  t.ndim = static_cast<std::int32_t>(v.shape.size());
  t.dtype = dl_type(v.type);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &delete_export<Managed>;
  return &ctx->managed;
}

// A capsule nobody consumed still owns its tensor (the DLPack rule): free it then.
void capsule_destructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, dlpack::kCapsule)) {
    auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap, dlpack::kCapsule));
    if (m && m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(cap, dlpack::kCapsuleVersioned)) {
    auto* m = static_cast<dlpack::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, dlpack::kCapsuleVersioned));
    if (m && m->deleter) m->deleter(m);
  }
  PyErr_Clear();  // IsValid/GetPointer on a renamed capsule set no error, but stay clean
}

// A device array of the market's outputs: shared storage, the session whose stream writes it.
struct Array {
  DeviceView view;
  std::shared_ptr<MarketSession> session;

  py::tuple dlpack_device() const { return py::make_tuple(static_cast<int>(dlpack::kCUDA), view.device); }

  py::object dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const {
    if (!dl_device.is_none()) {
      const auto d = dl_device.cast<std::pair<int, int>>();
      if (d.first != dlpack::kCUDA || d.second != view.device)
        throw py::buffer_error("foxhunt arrays live on " + device_name(dlpack::kCUDA, view.device) +
                               " and export without copies; dl_device " + device_name(d.first, d.second) +
                               " would need one");
    }
    if (!copy.is_none() && copy.cast<bool>())
      throw py::buffer_error("foxhunt arrays export without copies (copy=True is not supported)");
    // DLPack stream semantics for CUDA: None and 1 the legacy default stream, 2 the per-thread
    // default stream, -1 no synchronization, 0 disallowed, others a cudaStream_t.
    if (stream.is_none()) {
      session->make_stream_wait(1);
    } else {
      const auto s = stream.cast<std::int64_t>();
      if (s == 0) throw py::value_error("__dlpack__: stream=0 is ambiguous in DLPack; use 1 for the legacy default stream");
      if (s != -1) {
        if (s < -1) throw py::value_error("__dlpack__: stream must be -1, 1, 2 or a CUDA stream handle");
        session->make_stream_wait(static_cast<StreamHandle>(s));
      }
    }
    const bool versioned = !max_version.is_none() && max_version.cast<std::pair<int, int>>().first >= 1;
    if (versioned) {
      auto* m = make_managed<dlpack::ManagedTensorVersioned>(view);
      m->version = dlpack::kVersion;
      m->flags = 0;
      PyObject* cap = PyCapsule_New(m, dlpack::kCapsuleVersioned, &capsule_destructor);
      if (!cap) {
        m->deleter(m);
        throw py::error_already_set();
      }
      return py::reinterpret_steal<py::object>(cap);
    }
    auto* m = make_managed<dlpack::ManagedTensor>(view);
    PyObject* cap = PyCapsule_New(m, dlpack::kCapsule, &capsule_destructor);
    if (!cap) {
      m->deleter(m);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(cap);
  }

  py::tuple shape() const {
    py::tuple t(view.shape.size());
    for (std::size_t k = 0; k < view.shape.size(); ++k) t[k] = view.shape[k];
    return t;
  }
};

Array array_of(DeviceView v, const std::shared_ptr<MarketSession>& s, bool drop_time) {
  if (drop_time) v.shape.erase(v.shape.begin());
  return Array{std::move(v), s};
}

// ---- import: a DLPack producer's actions ------------------------------------------------------
struct ActionSpec {
  rl::ActionMode mode;
  int width;
  std::int64_t num_envs;
  int device;
  std::string expected_shapes() const {
    std::string s = "(N, assets) = " + shape_str({num_envs, width});
    if (width == 1) s += " or (N,) = " + shape_str({num_envs});
    s += ", or (T, N, assets) = (T, " + std::to_string(num_envs) + ", " + std::to_string(width) + ") for T steps in one call";
    return s;
  }
};

ActionSpec spec_of(const rl::MarketConfig& c, std::int64_t num_envs, int device) {
  return ActionSpec{c.action, c.assets, num_envs, device};
}

// Validated actions: a device pointer, the number of steps, and how to release the producer's
// tensor (renamed capsule: the deleter is ours to call).
struct Actions {
  const void* data = nullptr;
  std::int64_t steps = 1;
  bool time_axis = false;
  std::function<void()> release;
};

// Checks `obj` against `spec` and takes it over; __dlpack__ is asked for `dlpack_stream` (the
// stream that will read it: the producer makes it wait for its own work).
Actions take_actions(const py::object& obj, const ActionSpec& spec, std::int64_t dlpack_stream) {
  const std::string what = spec.mode == rl::ActionMode::discrete
                               ? "int32 level indices (discrete market; -1 keeps the holdings)"
                               : "float32 target weights in [-1, 1] (continuous market; NaN keeps the holdings)";
  if (!py::hasattr(obj, "__dlpack__") || !py::hasattr(obj, "__dlpack_device__"))
    throw py::type_error("actions must be a device array with the DLPack protocol (__dlpack__, e.g. a torch.Tensor) of " +
                         what + " on cuda:" + std::to_string(spec.device) + "; got a " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  const auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
  if (dev.first != dlpack::kCUDA || dev.second != spec.device)
    throw py::value_error("actions must be on cuda:" + std::to_string(spec.device) + " (the market's device); got " +
                          device_name(dev.first, dev.second));
  py::object cap = obj.attr("__dlpack__")(py::arg("stream") = dlpack_stream);
  if (!PyCapsule_IsValid(cap.ptr(), dlpack::kCapsule))
    throw py::type_error("actions: __dlpack__ returned no \"dltensor\" capsule");
  auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), dlpack::kCapsule));
  const dlpack::Tensor& t = m->dl_tensor;
  const std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim);
  const bool type_ok = spec.mode == rl::ActionMode::discrete
                           ? t.dtype.code == dlpack::kInt && t.dtype.bits == 32 && t.dtype.lanes == 1
                           : t.dtype.code == dlpack::kFloat && t.dtype.bits == 32 && t.dtype.lanes == 1;
  if (!type_ok)
    throw py::value_error("actions must be " + what + "; got " + dtype_name(t.dtype));
  const std::int64_t n = spec.num_envs, w = spec.width;
  Actions a;
  if (t.ndim == 1 && w == 1 && shape[0] == n) {
  } else if (t.ndim == 2 && shape[0] == n && shape[1] == w) {
  } else if (t.ndim == 3 && shape[0] >= 1 && shape[1] == n && shape[2] == w) {
    a.steps = shape[0];
    a.time_axis = true;
  } else {
    throw py::value_error("actions must have shape " + spec.expected_shapes() + "; got " + shape_str(shape));
  }
  if (t.strides != nullptr) {
    std::int64_t expect = 1;
    for (int k = t.ndim; k-- > 0;) {
      if (shape[k] != 1 && t.strides[k] != expect)
        throw py::value_error("actions must be contiguous (row-major; call .contiguous()); got strides " +
                              shape_str(std::vector<std::int64_t>(t.strides, t.strides + t.ndim)));
      expect *= shape[k];
    }
  }
  a.data = static_cast<const char*>(t.data) + t.byte_offset;
  // Taken: the capsule is renamed, and its deleter is called once no work reads the data.
  PyCapsule_SetName(cap.ptr(), dlpack::kUsedCapsule);
  a.release = [m] {
    if (m->deleter) m->deleter(m);
  };
  return a;
}

// DLPack's stream value for a session stream: the legacy default stream is 1 there, never 0.
std::int64_t dlpack_stream_of(StreamHandle h) { return h == 0 ? 1 : static_cast<std::int64_t>(h); }

rl::MarketConfig config_from(const py::object& c) {
  if (py::isinstance<rl::MarketConfig>(c)) return c.cast<rl::MarketConfig>();
  return rl::load_market_config(c.cast<std::filesystem::path>());
}

}  // namespace

PYBIND11_MODULE(_foxhunt, m) {
  m.doc() = "foxhunt's GPU markets from Python (docs/python.md)";

  // Config errors: the reader's message (file, line, key, value, what is allowed), and .errors,
  // one line per problem.
  static py::handle config_error =
      PyErr_NewExceptionWithDoc("foxhunt.ConfigError", "A config file with problems: one line per problem in .errors",
                                PyExc_ValueError, nullptr);
  m.attr("ConfigError") = config_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const config::Error& e) {
      py::object inst = py::reinterpret_borrow<py::object>(config_error)(e.what());
      inst.attr("errors") = py::cast(e.errors());
      PyErr_SetObject(config_error.ptr(), inst.ptr());
    }
  });

  py::class_<rl::MarketConfig>(m, "MarketConfig", "A validated market config (configs/markets/*.toml)")
      .def_property_readonly("assets", [](const rl::MarketConfig& c) { return c.assets; })
      .def_property_readonly("dt", [](const rl::MarketConfig& c) { return c.dt; })
      .def_property_readonly("episode_length", [](const rl::MarketConfig& c) { return c.episode_length; })
      .def_property_readonly("window", [](const rl::MarketConfig& c) { return c.window; })
      .def_property_readonly("initial_cash", [](const rl::MarketConfig& c) { return c.initial_cash; })
      .def_property_readonly("extra_features", [](const rl::MarketConfig& c) { return c.extra_features; })
      .def_property_readonly("process", [](const rl::MarketConfig& c) { return std::string(rl::to_string(c.process)); })
      .def_property_readonly("action", [](const rl::MarketConfig& c) { return std::string(to_name(c.action)); })
      .def_property_readonly("levels", [](const rl::MarketConfig& c) { return c.levels; })
      .def_property_readonly("reward", [](const rl::MarketConfig& c) { return std::string(rl::to_string(c.reward)); })
      .def_property_readonly("position_limit", [](const rl::MarketConfig& c) { return c.position_limit; })
      .def_property_readonly("obs_dim", [](const rl::MarketConfig& c) { return rl::market_obs_dim(c); })
      .def("to_toml", &rl::market_config_toml, "The config as a market file that reads back to it")
      .def("split", [](const rl::MarketConfig& c, const std::string& part) { return rl::split_market(c, rl::parse_split(part)); },
           py::arg("part"), "The same replay market on one part of its [split]: train, validation or test")
      .def("__eq__", [](const rl::MarketConfig& a, const rl::MarketConfig& b) { return a == b; })
      .def("__repr__", [](const rl::MarketConfig& c) {
        return "<foxhunt.MarketConfig " + std::string(rl::to_string(c.process)) + ", " + std::to_string(c.assets) +
               " assets, " + to_name(c.action) + " actions, obs_dim " + std::to_string(rl::market_obs_dim(c)) + ">";
      });

  m.def("load_market_config", [](const std::filesystem::path& p) { return rl::load_market_config(p); }, py::arg("path"),
        "Reads and validates a market config file; ConfigError lists every problem");
  m.def("parse_market_config", &rl::parse_market_config, py::arg("text"), py::arg("source") = "<string>",
        "Parses and validates market config TOML text; `source` names it in messages");

  m.def("device_count", [] { return gpu::device_count(); }, "CUDA devices this process can use");
  m.def(
      "cuda_unavailable_reason",
      [] {
        std::string why;
        return gpu::device_count(&why) > 0 ? std::string() : why;
      },
      "Why no CUDA device can be used ('' when one can)");

  m.def(
      "check_actions",
      [](const rl::MarketConfig& c, std::int64_t num_envs, const py::object& actions, int device) {
        Actions a = take_actions(actions, spec_of(c, num_envs, device), -1);
        a.release();  // nothing was enqueued: the producer's tensor goes back at once
        return a.steps;
      },
      py::arg("config"), py::arg("num_envs"), py::arg("actions"), py::arg("device") = 0,
      "Checks an action array as Market.step would (dtype, shape, device); returns its steps T");

  py::class_<Array>(m, "Array",
                    "A device array of market outputs, exported with DLPack (torch.from_dlpack reads it without a "
                    "copy). It views the market's buffer: the next reset/step rewrites it.")
      .def("__dlpack__", &Array::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &Array::dlpack_device)
      .def_property_readonly("shape", &Array::shape)
      .def_property_readonly("dtype", [](const Array& a) { return std::string(element_name(a.view.type)); })
      .def_property_readonly("device", [](const Array& a) { return a.view.device; })
      .def_property_readonly("data_ptr", [](const Array& a) { return reinterpret_cast<std::uintptr_t>(a.view.data); })
      .def("__repr__", [](const Array& a) {
        return "<foxhunt.Array " + std::string(element_name(a.view.type)) + " " + shape_str(a.view.shape) + " on cuda:" +
               std::to_string(a.view.device) + ">";
      });

  py::class_<MarketSession, std::shared_ptr<MarketSession>>(m, "Market",
                                                            "N market environments stepped together on one device")
      .def(py::init([](const py::object& config, std::int64_t num_envs, int device, const std::string& obs_dtype,
                       std::optional<std::uint64_t> stream) {
             if (num_envs < 1 || num_envs > (std::int64_t{1} << 31))
               throw py::value_error("num_envs must be in [1, 2^31] (got " + std::to_string(num_envs) + ")");
             if (obs_dtype != "float32" && obs_dtype != "bfloat16")
               throw py::value_error("obs_dtype must be \"float32\" or \"bfloat16\" (got \"" + obs_dtype + "\")");
             if (device < 0) throw py::value_error("device must be >= 0 (got " + std::to_string(device) + ")");
             const rl::MarketConfig c = config_from(config);
             std::string why;
             if (gpu::device_count(&why) == 0) throw std::runtime_error("foxhunt.Market needs a CUDA device: " + why);
             std::optional<StreamHandle> s;
             if (stream) s = static_cast<StreamHandle>(*stream);
             return std::make_shared<MarketSession>(c, num_envs, device, obs_dtype == "bfloat16", s);
           }),
           py::arg("config"), py::arg("num_envs"), py::arg("device") = 0, py::arg("obs_dtype") = "float32",
           py::arg("stream") = py::none())
      .def_property_readonly("num_envs", &MarketSession::num_envs)
      .def_property_readonly("obs_dim", &MarketSession::obs_dim)
      .def_property_readonly("device", &MarketSession::device)
      .def_property_readonly("stream", &MarketSession::stream, "The cudaStream_t the market runs on, as an int")
      .def_property_readonly("config", &MarketSession::config)
      .def_property_readonly("obs_dtype",
                             [](const MarketSession& s) { return std::string(s.bf16_obs() ? "bfloat16" : "float32"); })
      .def_property_readonly("action_kind",
                             [](const MarketSession& s) { return std::string(to_name(s.config().action)); })
      .def_property_readonly("action_width", [](const MarketSession& s) { return s.config().assets; })
      .def(
          "reset",
          [](const std::shared_ptr<MarketSession>& s, std::uint64_t seed) { return array_of(s->reset(seed), s, true); },
          py::arg("seed") = 0, "Starts every environment from `seed`; returns the first observation (N, obs_dim)")
      .def(
          "step",
          [](const std::shared_ptr<MarketSession>& s, const py::object& actions) {
            Actions a = take_actions(actions, spec_of(s->config(), s->num_envs(), s->device()),
                                     dlpack_stream_of(s->stream()));
            const python::StepViews v = s->step(a.data, a.steps, std::move(a.release));
            const bool drop = !a.time_axis;
            return py::make_tuple(array_of(v.obs, s, drop), array_of(v.reward, s, drop),
                                  array_of(v.terminated, s, drop), array_of(v.truncated, s, drop),
                                  array_of(v.final_obs, s, drop));
          },
          py::arg("actions"),
          "Advances every environment with `actions` (N, assets) or (T, N, assets); returns (obs, reward, terminated, "
          "truncated, final_obs)")
      .def("synchronize", &MarketSession::synchronize, "Blocks until the market's stream is idle")
      .def(
          "episode_stats",
          [](MarketSession& s, bool clear) {
            py::dict d;
            for (const auto& [k, v] : s.episode_stats(clear)) d[py::str(k)] = v;
            return d;
          },
          py::arg("clear") = false, "Statistics of the episodes finished since reset (blocks until they are written)")
      .def(
          "_time_cpp_steps",
          [](const std::shared_ptr<MarketSession>& s, const py::object& actions, int calls) {
            Actions a = take_actions(actions, spec_of(s->config(), s->num_envs(), s->device()),
                                     dlpack_stream_of(s->stream()));
            double sec = 0.0;
            try {
              sec = s->time_steps(a.data, a.steps, calls);
            } catch (...) {
              s->synchronize();
              a.release();
              throw;
            }
            a.release();  // time_steps synchronized its stream
            return sec;
          },
          py::arg("actions"), py::arg("calls"),
          "Seconds per C++ step call with these actions (T, N, assets), timed on the stream (bench)");

  py::class_<gpu::TransferAudit>(m, "TransferAudit",
                                 "Counts the memory copies the CUDA driver performs between start() and stop() (CUPTI)")
      .def(py::init<>())
      .def_static("available",
                  [] {
                    std::string why;
                    const bool ok = gpu::TransferAudit::available(&why);
                    return py::make_tuple(ok, why);
                  })
      .def("start", &gpu::TransferAudit::start)
      .def("stop", [](gpu::TransferAudit& a) {
        const gpu::TransferCounts c = a.stop();
        py::dict d;
        d["host_to_device"] = c.host_to_device;
        d["device_to_host"] = c.device_to_host;
        d["device_to_device"] = c.device_to_device;
        d["peer"] = c.peer;
        d["other"] = c.other;
        d["total"] = c.total();
        d["dropped_records"] = c.dropped_records;
        d["summary"] = c.str();
        return d;
      });
}
