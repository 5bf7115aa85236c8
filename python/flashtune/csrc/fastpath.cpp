// python/flashtune/csrc/fastpath.cpp: flashtune._fastpath, the C++ eager path of flashtune.attention (issue 22).
//
// What it is: a torch C++ extension (built by python/setup.py when torch is importable at install time) that runs
// flashtune.attention's common case without Python in between: the eligibility test, the output allocations, the
// launch through the runtime's C ABI on torch's current stream, and autograd through a C++ node (AttentionBackward)
// whose backward launches the runtime's backward. The ctypes path (flashtune/ops.py) stays the reference behaviour
// and the fallback: this module never raises on an argument it does not like, it returns None and ops.py takes the
// slow path, which validates and raises the one clear error. So the argument rules and their messages live in one
// place (ops.py's _check); this file holds only a conservative predicate "the slow path would run this unchanged".
//
// Contracts:
// - bind(library_functions, runtime, error_class): `library_functions` are the addresses of ft_attention_forward,
//   ft_attention_backward and ft_last_error in the libflashtune_runtime.so ops.py loaded (no link-time dependency,
//   one library in the process); `runtime` a flashtune._runtime.Runtime whose handle the next calls use. Every
//   Runtime ever bound is kept alive until the process ends (a backward queued by autograd may still use it).
// - attention(q, k, v, sinks, causal, window, sink_tokens) -> (o, lse) | None. None unless: q, k, v exact torch
//   Tensors (no subclass) of one CUDA device, 4-D, contiguous, one dtype of fp32 / fp16 / bf16, k and v of one shape,
//   batch and head_dim equal to q's, heads_q a multiple of heads_kv, no empty tensor; window None or an int >= 0;
//   sink_tokens an int >= 0, > 0 only with a window; sinks None or a contiguous fp32 (heads_q,) tensor on q's device;
//   a runtime bound. Outputs: o like q, lse fp32 (batch, heads_q, seq_q) and not differentiable. Differentiable in
//   q, k, v and sinks under grad mode, as ops.py's _Attention.
// - Runtime errors raise flashtune.FlashtuneError(code, message) from the forward; from the backward (run by
//   autograd's engine) they surface as RuntimeError("FT_ERR_...: message").
#include <torch/extension.h>

#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashtune_runtime.h"

namespace {

namespace py = pybind11;
using torch::autograd::variable_list;

using PassFn = int (*)(ft_runtime*, const ft_attn_shape*, const ft_attn_tensors*, void*, void*, size_t);
using LastErrorFn = const char* (*)();

struct Library {
  PassFn forward = nullptr;
  PassFn backward = nullptr;
  LastErrorFn last_error = nullptr;
};

Library g_lib;
ft_runtime* g_runtime = nullptr;      // the bound runtime; read and written with the GIL held
std::vector<py::object>* g_kept;      // every Runtime bound (leaked on purpose: no destructor runs at exit)
py::object* g_error_class = nullptr;  // flashtune.FlashtuneError

// The host-time probe (python/bench/attention_e2e.py): while on, each call adds its phases' [ns] here. Phases: the
// eligibility checks, the output allocations, the runtime call (stream look-up and launch), and the whole call
// from entry to return (autograd's bookkeeping and the Python wrapping are total minus the others).
// For one thread's calls: calls from several threads at once (the GIL is released around the launch) may lose counts.
enum Phase { kChecks, kAlloc, kLaunch, kTotal, kPhases };
bool g_probe = false;
std::array<std::int64_t, kPhases> g_probe_ns{};
std::int64_t g_probe_calls = 0;
using ProbeClock = std::chrono::steady_clock;

std::int64_t probe_since(ProbeClock::time_point& t0) {
  const auto t1 = ProbeClock::now();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  t0 = t1;
  return ns;
}

const char* const kStatusNames[] = {"FT_OK",          "FT_ERR_ARGUMENT", "FT_ERR_NO_CONFIG", "FT_ERR_CONFIGS",
                                    "FT_ERR_COMPILE", "FT_ERR_CUDA",     "FT_ERR_BUFFER"};

// A failed runtime call: its status and ft_last_error()'s text, read on the thread that made the call.
struct CallError : std::runtime_error {
  int code;
  std::string message;
  CallError(int c, std::string m)
      : std::runtime_error(std::string(c >= 0 && c <= 6 ? kStatusNames[c] : "FT_ERR") + ": " + m),
        code(c),
        message(std::move(m)) {}
};

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return FT_F32;
    case at::kHalf: return FT_F16;
    case at::kBFloat16: return FT_BF16;
    default: return -1;
  }
}

// One launch of `fn` on the current stream of the tensors' device `dev`, which the caller made current (a
// CUDAGuard, before its allocations too, so that theirs find the device already set).
void launch(PassFn fn, ft_runtime* rt, const ft_attn_shape& shape, const ft_attn_tensors& t, const at::Device& dev) {
  void* stream = c10::cuda::getCurrentCUDAStream(dev.index()).stream();
  const int status = fn(rt, &shape, &t, stream, nullptr, 0);
  if (status != FT_OK) throw CallError(status, g_lib.last_error());
}

std::uint64_t ptr(const at::Tensor& t) { return t.defined() ? reinterpret_cast<std::uint64_t>(t.data_ptr()) : 0; }

ft_attn_shape shape_of(const at::Tensor& q, const at::Tensor& k, bool causal, std::int64_t window,
                       std::int64_t sink_tokens, bool learned) {
  ft_attn_shape s{};
  s.batch = q.size(0), s.heads_q = q.size(1), s.heads_kv = k.size(1);
  s.seq_q = q.size(2), s.seq_k = k.size(2), s.head_dim = q.size(3);
  s.causal = causal, s.window = std::int32_t(window), s.sink_tokens = std::int32_t(sink_tokens);
  s.learned_sinks = learned, s.dtype = dtype_code(q.scalar_type());
  return s;
}

// The forward launch: o and lse, as ops.py's _fwd_impl.
std::pair<at::Tensor, at::Tensor> forward_impl(ft_runtime* rt, const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& sinks, bool causal,
                                               std::int64_t window, std::int64_t sink_tokens) {
  ProbeClock::time_point t0;
  if (g_probe) t0 = ProbeClock::now();
  // at::detail::empty_cuda: the CUDA allocation without the dispatcher's round trip (what at::empty ends in)
  at::Tensor o = at::detail::empty_cuda(q.sizes(), q.scalar_type(), q.device(), std::nullopt);
  at::Tensor lse = at::detail::empty_cuda({q.size(0), q.size(1), q.size(2)}, at::kFloat, q.device(), std::nullopt);
  if (g_probe) g_probe_ns[kAlloc] += probe_since(t0);
  const ft_attn_shape s = shape_of(q, k, causal, window, sink_tokens, sinks.defined());
  ft_attn_tensors t{};
  t.q = ptr(q), t.k = ptr(k), t.v = ptr(v), t.o = ptr(o), t.lse = ptr(lse), t.sinks = ptr(sinks);
  launch(g_lib.forward, rt, s, t, q.device());
  if (g_probe) g_probe_ns[kLaunch] += probe_since(t0);
  return {o, lse};
}

// The autograd node of one differentiable call: its backward launches the runtime's backward (ops.py _bwd_impl).
// A hand-made Node, not torch::autograd::Function<T>: Function's generic bookkeeping (input infos, the saved_data
// map, output wrapping) cost ~4.5 us a call of the ~10 this path spends in C++ (H100, session 27 call 3).
// Next edges: q, k, v (+ sinks with learned sinks), in that order; its one input: o's gradient.
struct AttentionBackward : torch::autograd::Node {
  torch::autograd::SavedVariable q, k, v, o, lse, sinks;
  ft_runtime* runtime = nullptr;
  bool causal = false, learned = false;
  std::int64_t window = 0, sink_tokens = 0;

  std::string name() const override { return "flashtune::AttentionBackward"; }

  void release_variables() override {
    for (auto* sv : {&q, &k, &v, &o, &lse, &sinks}) sv->reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    const auto self = shared_from_this();
    const at::Tensor q_ = q.unpack(), k_ = k.unpack(), v_ = v.unpack(), o_ = o.unpack(self), lse_ = lse.unpack();
    const at::Tensor sinks_ = learned ? sinks.unpack() : at::Tensor();
    const c10::cuda::CUDAGuard guard(q_.device());
    at::Tensor dout = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(o_);
    at::Tensor dq = at::empty_like(q_), dk = at::empty_like(k_), dv = at::empty_like(v_);
    at::Tensor dsinks = learned ? at::empty({q_.size(1)}, q_.options().dtype(at::kFloat)) : at::Tensor();
    const ft_attn_shape s = shape_of(q_, k_, causal, window, sink_tokens, learned);
    ft_attn_tensors t{};
    t.q = ptr(q_), t.k = ptr(k_), t.v = ptr(v_), t.o = ptr(o_), t.lse = ptr(lse_), t.dout = ptr(dout);
    t.dq = ptr(dq), t.dk = ptr(dk), t.dv = ptr(dv), t.sinks = ptr(sinks_), t.dsinks = ptr(dsinks);
    launch(g_lib.backward, runtime, s, t, q_.device());
    variable_list out = {dq, dk, dv};
    if (learned) out.push_back(dsinks);
    return out;
  }
};

// The forward of a differentiable call: o gets an AttentionBackward as its grad_fn; lse stays a constant.
std::pair<at::Tensor, at::Tensor> forward_with_grad(ft_runtime* rt, const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, const at::Tensor& sinks, bool causal,
                                                    std::int64_t window, std::int64_t sink_tokens) {
  auto [o, lse] = forward_impl(rt, q, k, v, sinks, causal, window, sink_tokens);
  const std::shared_ptr<AttentionBackward> node(new AttentionBackward(), torch::autograd::deleteNode);
  node->set_next_edges(sinks.defined() ? torch::autograd::collect_next_edges(q, k, v, sinks)
                                       : torch::autograd::collect_next_edges(q, k, v));
  node->runtime = rt, node->causal = causal, node->window = window, node->sink_tokens = sink_tokens;
  node->learned = sinks.defined();
  torch::autograd::set_history(o, node);
  node->q = torch::autograd::SavedVariable(q, false);
  node->k = torch::autograd::SavedVariable(k, false);
  node->v = torch::autograd::SavedVariable(v, false);
  node->o = torch::autograd::SavedVariable(o, true);
  node->lse = torch::autograd::SavedVariable(lse, false);
  if (sinks.defined()) node->sinks = torch::autograd::SavedVariable(sinks, false);
  return {o, lse};
}

// An exact torch.Tensor (or Parameter) object, else nullptr: subclasses and other objects take the slow path.
const at::Tensor* exact_tensor(PyObject* obj) {
  return THPVariable_CheckExact(obj) ? &THPVariable_Unpack(obj) : nullptr;
}

// A Python int (not a bool) >= 0, or None as 0 when `none_ok`; -1 for anything else.
std::int64_t small_int(PyObject* obj, bool none_ok) {
  if (obj == Py_None) return none_ok ? 0 : -1;
  if (!PyLong_CheckExact(obj)) return -1;
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || x < 0 || x > INT32_MAX) return -1;
  return x;
}

py::object attention(py::handle q_obj, py::handle k_obj, py::handle v_obj, py::handle sinks_obj,
                     py::handle causal_obj, py::handle window_obj, py::handle sink_tokens_obj) {
  ProbeClock::time_point entry, t0;
  if (g_probe) entry = t0 = ProbeClock::now();
  if (!g_runtime) return py::none();
  const at::Tensor* qp = exact_tensor(q_obj.ptr());
  const at::Tensor* kp = exact_tensor(k_obj.ptr());
  const at::Tensor* vp = exact_tensor(v_obj.ptr());
  if (!qp || !kp || !vp) return py::none();
  const at::Tensor &q = *qp, &k = *kp, &v = *vp;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !q.is_cuda()) return py::none();
  if (dtype_code(q.scalar_type()) < 0 || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    return py::none();
  if (k.device() != q.device() || v.device() != q.device()) return py::none();
  if (!q.is_contiguous() || !k.is_contiguous() || !v.is_contiguous()) return py::none();
  if (k.size(0) != q.size(0) || k.size(3) != q.size(3) || v.sizes() != k.sizes()) return py::none();
  if (k.size(1) == 0 || q.size(1) % k.size(1) != 0 || q.numel() == 0 || k.numel() == 0) return py::none();
  const std::int64_t window = small_int(window_obj.ptr(), true);
  const std::int64_t sink_tokens = small_int(sink_tokens_obj.ptr(), false);
  if (window < 0 || sink_tokens < 0 || (sink_tokens > 0 && window == 0)) return py::none();
  at::Tensor sinks;
  if (!sinks_obj.is_none()) {
    const at::Tensor* sp = exact_tensor(sinks_obj.ptr());
    if (!sp || sp->scalar_type() != at::kFloat || sp->dim() != 1 || sp->size(0) != q.size(1) ||
        sp->device() != q.device() || !sp->is_contiguous())
      return py::none();
    sinks = *sp;
  }
  const int truth = PyObject_IsTrue(causal_obj.ptr());
  if (truth < 0) throw py::error_already_set();
  const bool causal = truth == 1;
  ft_runtime* const runtime = g_runtime;  // read with the GIL held: bind() may change it once it is released
  if (g_probe) g_probe_ns[kChecks] += probe_since(t0);
  try {
    at::Tensor o, lse;
    {
      const py::gil_scoped_release unlocked;  // a first call of a shape compiles for seconds
      const c10::cuda::CUDAGuard guard(q.device());
      if (at::GradMode::is_enabled() &&
          (q.requires_grad() || k.requires_grad() || v.requires_grad() || (sinks.defined() && sinks.requires_grad()))) {
        std::tie(o, lse) = forward_with_grad(runtime, q, k, v, sinks, causal, window, sink_tokens);
      } else {
        std::tie(o, lse) = forward_impl(runtime, q, k, v, sinks, causal, window, sink_tokens);
      }
    }
    py::tuple out = py::make_tuple(py::reinterpret_steal<py::object>(THPVariable_Wrap(o)),
                                   py::reinterpret_steal<py::object>(THPVariable_Wrap(lse)));
    if (g_probe) g_probe_ns[kTotal] += probe_since(entry), ++g_probe_calls;
    return out;
  } catch (const CallError& e) {
    PyErr_SetObject(g_error_class->ptr(), (*g_error_class)(e.code, e.message).ptr());
    throw py::error_already_set();
  }
}

// attention() as a raw CPython METH_FASTCALL function: pybind11's argument dispatch costs ~1 us a call, a
// quarter of this path's own budget. Python errors pass through; C++ ones become RuntimeError.
PyObject* attention_fastcall(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "attention(q, k, v, sinks, causal, window, sink_tokens): 7 arguments");
    return nullptr;
  }
  try {
    return attention(args[0], args[1], args[2], args[3], args[4], args[5], args[6]).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyMethodDef g_attention_def = {"attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&attention_fastcall)),
                               METH_FASTCALL,
                               "attention(q, k, v, sinks, causal, window, sink_tokens) -> (o, lse), or None when the "
                               "Python path must take the call"};

void bind(py::sequence functions, py::object runtime, py::object error_class) {
  if (py::len(functions) != 3) throw py::value_error("bind: expected (forward, backward, last_error) addresses");
  g_lib.forward = reinterpret_cast<PassFn>(functions[0].cast<std::uintptr_t>());
  g_lib.backward = reinterpret_cast<PassFn>(functions[1].cast<std::uintptr_t>());
  g_lib.last_error = reinterpret_cast<LastErrorFn>(functions[2].cast<std::uintptr_t>());
  if (!g_lib.forward || !g_lib.backward || !g_lib.last_error) throw py::value_error("bind: a NULL function address");
  if (!g_kept) g_kept = new std::vector<py::object>();
  if (!g_error_class) g_error_class = new py::object();
  *g_error_class = std::move(error_class);
  g_kept->push_back(runtime);
  g_runtime = reinterpret_cast<ft_runtime*>(runtime.attr("handle").cast<std::uintptr_t>());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flashtune's C++ eager path of flashtune.attention (csrc/fastpath.cpp); ops.py is its only caller";
  m.add_object("attention", py::reinterpret_steal<py::object>(PyCFunction_NewEx(&g_attention_def, nullptr, m.ptr())));
  m.def("bind", &bind, "binds the runtime library's functions and the Runtime the next calls use");
  m.def("abi_version", [] { return FT_RUNTIME_ABI_VERSION; });
  m.def(
      "probe", [](bool on) {
        py::dict d;
        d["calls"] = g_probe_calls;
        const char* names[] = {"checks", "alloc", "launch", "total"};
        for (int i = 0; i < kPhases; ++i) d[names[i]] = g_probe_ns[std::size_t(i)];
        g_probe = on, g_probe_ns = {}, g_probe_calls = 0;
        return d;
      },
      "turns the host-time probe on or off; returns the [ns] per phase summed since the last call, and the calls");
}
