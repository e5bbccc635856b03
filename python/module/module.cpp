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
#if FOXHUNT_PYTHON_AGENT
#include "python/agent/checkpoint_agent.hpp"
#endif
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

// A device array a market or agent wrote: shared storage, and how a consumer's stream waits for
// the write (the producer's make_stream_wait).
struct Array {
  DeviceView view;
  std::function<void(StreamHandle)> wait_for_write;

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
      wait_for_write(1);
    } else {
      const auto s = stream.cast<std::int64_t>();
      if (s == 0) throw py::value_error("__dlpack__: stream=0 is ambiguous in DLPack; use 1 for the legacy default stream");
      if (s != -1) {
        if (s < -1) throw py::value_error("__dlpack__: stream must be -1, 1, 2 or a CUDA stream handle");
        wait_for_write(static_cast<StreamHandle>(s));
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
  return Array{std::move(v), [s](StreamHandle h) { s->make_stream_wait(h); }};
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

// A producer's array taken over for reading: its data, shape, and how to give it back (the
// capsule is renamed, so its deleter is ours to call).
struct Lent {
  const void* data = nullptr;
  std::vector<std::int64_t> shape;
  dlpack::DataType dtype{};
  std::function<void()> release;
};

// Asks `obj` (any DLPack producer) for its array on cuda:`device`, readable on `dlpack_stream`
// (the producer makes that stream wait for its own work); `what` describes the expected array
// for the messages. Refuses other devices, and arrays that are not compact row-major.
Lent borrow(const py::object& obj, int device, std::int64_t dlpack_stream, const std::string& name,
            const std::string& what) {
  if (!py::hasattr(obj, "__dlpack__") || !py::hasattr(obj, "__dlpack_device__"))
    throw py::type_error(name + " must be a device array with the DLPack protocol (__dlpack__, e.g. a torch.Tensor) of " +
                         what + " on cuda:" + std::to_string(device) + "; got a " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  const auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
  if (dev.first != dlpack::kCUDA || dev.second != device)
    throw py::value_error(name + " must be on cuda:" + std::to_string(device) + " (the market's device); got " +
                          device_name(dev.first, dev.second));
  py::object cap = obj.attr("__dlpack__")(py::arg("stream") = dlpack_stream);
  if (!PyCapsule_IsValid(cap.ptr(), dlpack::kCapsule))
    throw py::type_error(name + ": __dlpack__ returned no \"dltensor\" capsule");
  auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), dlpack::kCapsule));
  const dlpack::Tensor& t = m->dl_tensor;
  Lent l;
  l.shape.assign(t.shape, t.shape + t.ndim);
  l.dtype = t.dtype;
  if (t.strides != nullptr) {
    std::int64_t expect = 1;
    for (int k = t.ndim; k-- > 0;) {
      if (l.shape[k] != 1 && t.strides[k] != expect)
        throw py::value_error(name + " must be contiguous (row-major; call .contiguous()); got strides " +
                              shape_str(std::vector<std::int64_t>(t.strides, t.strides + t.ndim)));
      expect *= l.shape[k];
    }
  }
  l.data = static_cast<const char*>(t.data) + t.byte_offset;
  // Taken: renamed now; the checks that follow may still refuse it, and then `release` gives it
  // back at once (Lent's owner calls it on every path).
  PyCapsule_SetName(cap.ptr(), dlpack::kUsedCapsule);
  l.release = [m] {
    if (m->deleter) m->deleter(m);
  };
  return l;
}

// Gives a Lent back when a check refuses it (or when nothing was enqueued).
struct ReturnOnExit {
  Lent& lent;
  bool armed = true;
  ~ReturnOnExit() {
    if (armed && lent.release) lent.release();
  }
};

// Validated actions: a device pointer, the number of steps, and how to release them.
struct Actions {
  const void* data = nullptr;
  std::int64_t steps = 1;
  bool time_axis = false;
  std::function<void()> release;
};

// Checks `obj` against `spec` and takes it over; read on `dlpack_stream`.
Actions take_actions(const py::object& obj, const ActionSpec& spec, std::int64_t dlpack_stream) {
  const std::string what = spec.mode == rl::ActionMode::discrete
                               ? "int32 level indices (discrete market; -1 keeps the holdings)"
                               : "float32 target weights in [-1, 1] (continuous market; NaN keeps the holdings)";
  Lent l = borrow(obj, spec.device, dlpack_stream, "actions", what);
  ReturnOnExit guard{l};
  const dlpack::DataType& d = l.dtype;
  const bool type_ok = spec.mode == rl::ActionMode::discrete ? d.code == dlpack::kInt && d.bits == 32 && d.lanes == 1
                                                             : d.code == dlpack::kFloat && d.bits == 32 && d.lanes == 1;
  if (!type_ok) throw py::value_error("actions must be " + what + "; got " + dtype_name(d));
  const std::vector<std::int64_t>& shape = l.shape;
  const std::int64_t n = spec.num_envs, w = spec.width;
  Actions a;
  if (shape.size() == 1 && w == 1 && shape[0] == n) {
  } else if (shape.size() == 2 && shape[0] == n && shape[1] == w) {
  } else if (shape.size() == 3 && shape[0] >= 1 && shape[1] == n && shape[2] == w) {
    a.steps = shape[0];
    a.time_axis = true;
  } else {
    throw py::value_error("actions must have shape " + spec.expected_shapes() + "; got " + shape_str(shape));
  }
  a.data = l.data;
  a.release = std::move(l.release);
  guard.armed = false;
  return a;
}

// Observations for an agent: float32 (N, obs_dim) on the device, taken over like actions.
Lent take_obs(const py::object& obj, std::int64_t n, std::int64_t obs_dim, int device, std::int64_t dlpack_stream) {
  const std::string what = "float32 observations of shape (N, obs_dim) = " + shape_str({n, obs_dim});
  Lent l = borrow(obj, device, dlpack_stream, "obs", what);
  ReturnOnExit guard{l};
  if (!(l.dtype.code == dlpack::kFloat && l.dtype.bits == 32 && l.dtype.lanes == 1))
    throw py::value_error("obs must be " + what + "; got " + dtype_name(l.dtype));
  if (l.shape != std::vector<std::int64_t>{n, obs_dim})
    throw py::value_error("obs must be " + what + "; got " + shape_str(l.shape));
  guard.armed = false;
  return l;
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
             gpu::require_device("foxhunt.Market");
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
      .def(
          "_step_in_order",
          [](MarketSession& s, std::uintptr_t actions) {
            return reinterpret_cast<std::uintptr_t>(s.step_in_order(reinterpret_cast<const void*>(actions)));
          },
          py::arg("actions_ptr"),
          "foxhunt.TorchMarket's step: actions (N, assets) at a device address, read in order on the market's "
          "stream (checked by the caller); returns the outputs' storage address")
      .def(
          "_last_step",
          [](const std::shared_ptr<MarketSession>& s) {
            const python::StepViews v = s->last_step();
            return py::make_tuple(array_of(v.obs, s, false), array_of(v.reward, s, false),
                                  array_of(v.terminated, s, false), array_of(v.truncated, s, false),
                                  array_of(v.final_obs, s, false));
          },
          "The (obs, reward, terminated, truncated, final_obs) buffers a one-step call writes")
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

#if FOXHUNT_PYTHON_AGENT
  using python::CheckpointAgent;
  m.attr("has_agent") = true;
  py::class_<CheckpointAgent, std::shared_ptr<CheckpointAgent>>(
      m, "Agent", "The greedy policy of a trained checkpoint (what foxhunt eval acts with), acting on device arrays")
      .def(py::init([](const std::filesystem::path& checkpoint, const std::shared_ptr<MarketSession>& market,
                       const std::optional<std::filesystem::path>& config) {
             if (!market) throw py::type_error("market must be a foxhunt.Market (the environments the agent acts for)");
             std::optional<std::string> c;
             if (config) c = config->string();
             return std::make_shared<CheckpointAgent>(checkpoint.string(), c, market);
           }),
           py::arg("checkpoint"), py::arg("market"), py::arg("config") = py::none(),
           "checkpoint: a checkpoint or run directory (its latest); config: the run config (default: the "
           "checkpoint's); sized for market's environments")
      .def_property_readonly("checkpoint", &CheckpointAgent::checkpoint_dir)
      .def_property_readonly("config_file", &CheckpointAgent::config_file)
      .def_property_readonly("learner", &CheckpointAgent::learner)
      .def_property_readonly("stream", &CheckpointAgent::stream, "The cudaStream_t the policy runs on, as an int")
      .def(
          "act",
          [](const std::shared_ptr<CheckpointAgent>& a, const py::object& obs, std::int64_t step) {
            Lent o = take_obs(obs, a->num_envs(), a->obs_dim(), a->device(), dlpack_stream_of(a->stream()));
            DeviceView v = a->act(o.data, step, std::move(o.release));
            return Array{std::move(v), [a](StreamHandle h) { a->make_stream_wait(h); }};
          },
          py::arg("obs"), py::arg("step"),
          "Greedy actions (N, assets) for obs (N, obs_dim) float32 at episode step `step` (0 right after a "
          "reset); the array is rewritten by the next act()");
#else
  m.attr("has_agent") = false;
#endif

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
