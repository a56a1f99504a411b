// tensorjit.hpp: a small header-only C++17 wrapper of libtensorjit's C API.
//
// RAII owners for the C objects, values with operator overloads, and
// exceptions for statuses:
//
//   tj::Context ctx;
//   tj::Graph g(ctx, "block");
//   tj::Value x = g.input("x", TJ_DTYPE_F32, {g.symbol("B"), 1024});
//   tj::Value w = g.input("w", TJ_DTYPE_F32, {1024, 4096});
//   tj::Value b = g.input("b", TJ_DTYPE_F32, {4096});
//   g.output(tj::gelu(tj::matmul(x, w) + b, /*approximate=*/true), "y");
//   tj::Executable exe = tj::compile(g);      // finalizes g
//   exe.run({tj::view(xs), tj::view(ws), tj::view(bs)}, {tj::view(ys)});
//
// Ownership follows the C API's lifecycle verbs:
//   tj::Context, tj::Graph   uniquely owned (_create/_destroy): move-only;
//   tj::Executable           ref-counted (_retain/_release): copies share
//                            the compiled code; the last one frees it.
// A tj::Value is plain data (a tj_value_t plus its graph) and is valid as
// long as its graph. Every failure throws tj::Error carrying the status
// code and message; builder calls throw at the call that failed (the C
// graph keeps the error, so finalize() reports it too). Destructors never
// throw.

#ifndef TENSORJIT_EXAMPLES_CPP_TENSORJIT_HPP_
#define TENSORJIT_EXAMPLES_CPP_TENSORJIT_HPP_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tensorjit.h"

namespace tj {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

// A non-OK tj_status_t: what() is "CODE_NAME: message".
class Error : public std::runtime_error {
 public:
  Error(tj_status_code_t code, const std::string& message)
      : std::runtime_error(std::string(tj_status_code_name(code)) + ": " +
                           message),
        code_(code),
        message_(message) {}

  tj_status_code_t code() const noexcept { return code_; }
  const char* code_name() const noexcept { return tj_status_code_name(code_); }
  // The library's message alone (names the op, node and shapes).
  const std::string& message() const noexcept { return message_; }

 private:
  tj_status_code_t code_;
  std::string message_;
};

// Takes ownership of |status|: frees it, throwing Error if it is not OK.
inline void check(tj_status_t status) {
  if (status == nullptr) return;
  tj_status_code_t code = tj_status_code(status);
  std::string message = tj_status_message(status);
  tj_status_free(status);
  throw Error(code, message);
}

//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

class Context {
 public:
  Context() { check(tj_context_create(nullptr, &context_)); }
  explicit Context(const tj_context_options_t& options) {
    check(tj_context_create(&options, &context_));
  }
  ~Context() { tj_context_destroy(context_); }
  Context(Context&& other) noexcept
      : context_(std::exchange(other.context_, nullptr)) {}
  Context& operator=(Context&& other) noexcept {
    if (this != &other) {
      tj_context_destroy(context_);
      context_ = std::exchange(other.context_, nullptr);
    }
    return *this;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  tj_context_t* get() const noexcept { return context_; }

 private:
  tj_context_t* context_ = nullptr;
};

//===----------------------------------------------------------------------===//
// Graph and Value
//===----------------------------------------------------------------------===//

class Graph;

// A value of a graph. Default-constructed values are "none" (e.g. the
// absent gamma of layer_norm).
class Value {
 public:
  Value() = default;
  Value(Graph* graph, tj_value_t value) : graph_(graph), value_(value) {}

  Graph& graph() const;
  tj_value_t get() const noexcept { return value_; }
  bool is_none() const noexcept { return tj_value_is_none(value_); }

  tj_dtype_t dtype() const;
  // Dims: constants >= 0 or symbolic dims (< -1) of the graph.
  std::vector<int64_t> dims() const;

 private:
  Graph* graph_ = nullptr;
  tj_value_t value_ = tj_value_none();
};

class Graph {
 public:
  Graph(const Context& context, const char* name = "main") {
    check(tj_graph_create(context.get(), name, &graph_));
  }
  // Takes ownership of a C graph (e.g. from tj_graph_parse).
  explicit Graph(tj_graph_t* graph) noexcept : graph_(graph) {}
  ~Graph() { tj_graph_destroy(graph_); }
  Graph(Graph&& other) noexcept
      : graph_(std::exchange(other.graph_, nullptr)) {}
  Graph& operator=(Graph&& other) noexcept {
    if (this != &other) {
      tj_graph_destroy(graph_);
      graph_ = std::exchange(other.graph_, nullptr);
    }
    return *this;
  }
  // Values point at their graph: a graph neither copies nor moves while
  // values of it are in use (moving is for returning a fresh graph).
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  static Graph parse(const Context& context, const std::string& text,
                     const char* filename = nullptr) {
    tj_graph_t* graph = nullptr;
    check(tj_graph_parse(context.get(), text.data(), text.size(), filename,
                         &graph));
    return Graph(graph);
  }

  tj_graph_t* get() const noexcept { return graph_; }

  // Throws the graph's recorded error if |value| is none, else wraps it.
  Value wrap(tj_value_t value) {
    if (tj_value_is_none(value)) {
      tj_status_t status = tj_graph_status(graph_);
      if (status == nullptr) {
        throw Error(TJ_STATUS_INTERNAL, "builder returned none, no error");
      }
      check(status);
    }
    return Value(this, value);
  }

  void finalize() { check(tj_graph_finalize(graph_)); }

  std::string print() const {
    char* text = nullptr;
    check(tj_graph_print(graph_, &text));
    std::string result(text);
    tj_context_free_string(tj_graph_context(graph_), text);
    return result;
  }

  //===--- leaves ---===//

  int64_t symbol(const char* name) {
    int64_t dim = tj_graph_symbol(graph_, name);
    if (dim == TJ_DIM_INVALID) check(tj_graph_status(graph_));
    return dim;
  }

  Value input(const char* name, tj_dtype_t dtype,
              std::initializer_list<int64_t> dims) {
    std::vector<int64_t> d(dims);
    return wrap(tj_graph_input(graph_, dtype, static_cast<int32_t>(d.size()),
                               d.data(), name));
  }

  // A constant copied from |data| (dense row-major, |dims| elements).
  template <typename T>
  Value constant(tj_dtype_t dtype, const std::vector<int64_t>& dims,
                 const std::vector<T>& data) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    if (count < 0 || static_cast<size_t>(count) * tj_dtype_size(dtype) !=
                         data.size() * sizeof(T)) {
      throw Error(TJ_STATUS_INVALID_ARGUMENT,
                  "constant: data size does not match dims and dtype");
    }
    return wrap(tj_graph_constant(graph_, dtype,
                                  static_cast<int32_t>(dims.size()),
                                  dims.data(), data.data(),
                                  data.size() * sizeof(T)));
  }

  Value scalar(tj_dtype_t dtype, double value) {
    return wrap(tj_graph_scalar(graph_, dtype, value));
  }

  void output(Value value, const char* name) {
    tj_graph_output(graph_, value.get(), name);
    check(tj_graph_status(graph_));
  }

 private:
  tj_graph_t* graph_ = nullptr;
};

inline Graph& Value::graph() const {
  if (graph_ == nullptr) {
    throw Error(TJ_STATUS_INVALID_ARGUMENT, "a none value has no graph");
  }
  return *graph_;
}

inline tj_dtype_t Value::dtype() const {
  return tj_graph_value_dtype(graph().get(), value_);
}

inline std::vector<int64_t> Value::dims() const {
  int32_t rank = tj_graph_value_rank(graph().get(), value_);
  if (rank < 0) throw Error(TJ_STATUS_INVALID_ARGUMENT, "invalid value");
  int64_t dims[TJ_MAX_RANK];
  tj_graph_value_dims(graph().get(), value_, dims);
  return std::vector<int64_t>(dims, dims + rank);
}

//===--- ops: free functions over values, builder errors as exceptions ---===//

namespace detail {
inline Graph& same_graph(const Value& a, const Value& b) {
  if (&a.graph() != &b.graph()) {
    throw Error(TJ_STATUS_INVALID_ARGUMENT,
                "operands belong to different graphs");
  }
  return a.graph();
}
}  // namespace detail

#define TJ_HPP_UNARY(name)                                            \
  inline Value name(const Value& a) {                                 \
    return a.graph().wrap(tj_graph_##name(a.graph().get(), a.get())); \
  }
TJ_HPP_UNARY(neg)
TJ_HPP_UNARY(abs)
TJ_HPP_UNARY(exp)
TJ_HPP_UNARY(log)
TJ_HPP_UNARY(sqrt)
TJ_HPP_UNARY(rsqrt)
TJ_HPP_UNARY(tanh)
TJ_HPP_UNARY(sigmoid)
TJ_HPP_UNARY(erf)
TJ_HPP_UNARY(relu)
TJ_HPP_UNARY(silu)
TJ_HPP_UNARY(logical_not)
TJ_HPP_UNARY(isnan)
#undef TJ_HPP_UNARY

#define TJ_HPP_BINARY(name)                                    \
  inline Value name(const Value& a, const Value& b) {          \
    Graph& g = detail::same_graph(a, b);                       \
    return g.wrap(tj_graph_##name(g.get(), a.get(), b.get())); \
  }
TJ_HPP_BINARY(add)
TJ_HPP_BINARY(sub)
TJ_HPP_BINARY(mul)
TJ_HPP_BINARY(div)
TJ_HPP_BINARY(pow)
TJ_HPP_BINARY(maximum)
TJ_HPP_BINARY(minimum)
TJ_HPP_BINARY(matmul)
TJ_HPP_BINARY(eq)
TJ_HPP_BINARY(ne)
TJ_HPP_BINARY(lt)
TJ_HPP_BINARY(le)
TJ_HPP_BINARY(gt)
TJ_HPP_BINARY(ge)
#undef TJ_HPP_BINARY

// A scalar of |like|'s dtype, for mixing values with numbers.
inline Value scalar_like(const Value& like, double value) {
  return like.graph().scalar(like.dtype(), value);
}

inline Value operator+(const Value& a, const Value& b) { return add(a, b); }
inline Value operator-(const Value& a, const Value& b) { return sub(a, b); }
inline Value operator*(const Value& a, const Value& b) { return mul(a, b); }
inline Value operator/(const Value& a, const Value& b) { return div(a, b); }
inline Value operator-(const Value& a) { return neg(a); }
inline Value operator+(const Value& a, double b) {
  return a + scalar_like(a, b);
}
inline Value operator-(const Value& a, double b) {
  return a - scalar_like(a, b);
}
inline Value operator*(const Value& a, double b) {
  return a * scalar_like(a, b);
}
inline Value operator/(const Value& a, double b) {
  return a / scalar_like(a, b);
}
inline Value operator+(double a, const Value& b) {
  return scalar_like(b, a) + b;
}
inline Value operator-(double a, const Value& b) {
  return scalar_like(b, a) - b;
}
inline Value operator*(double a, const Value& b) {
  return scalar_like(b, a) * b;
}
inline Value operator/(double a, const Value& b) {
  return scalar_like(b, a) / b;
}
// Comparisons build bool values (they do not compare handles).
inline Value operator<(const Value& a, const Value& b) { return lt(a, b); }
inline Value operator<=(const Value& a, const Value& b) { return le(a, b); }
inline Value operator>(const Value& a, const Value& b) { return gt(a, b); }
inline Value operator>=(const Value& a, const Value& b) { return ge(a, b); }

inline Value where(const Value& cond, const Value& a, const Value& b) {
  Graph& g = detail::same_graph(cond, a);
  detail::same_graph(a, b);
  return g.wrap(tj_graph_where(g.get(), cond.get(), a.get(), b.get()));
}

inline Value cast(const Value& a, tj_dtype_t dtype) {
  return a.graph().wrap(tj_graph_cast(a.graph().get(), a.get(), dtype));
}

inline Value sum(const Value& a, std::vector<int32_t> axes = {},
                 bool keepdims = false) {
  return a.graph().wrap(tj_graph_sum(a.graph().get(), a.get(),
                                     static_cast<int32_t>(axes.size()),
                                     axes.data(), keepdims));
}

inline Value mean(const Value& a, std::vector<int32_t> axes = {},
                  bool keepdims = false) {
  return a.graph().wrap(tj_graph_mean(a.graph().get(), a.get(),
                                      static_cast<int32_t>(axes.size()),
                                      axes.data(), keepdims));
}

inline Value max(const Value& a, std::vector<int32_t> axes = {},
                 bool keepdims = false) {
  return a.graph().wrap(tj_graph_max(a.graph().get(), a.get(),
                                     static_cast<int32_t>(axes.size()),
                                     axes.data(), keepdims));
}

inline Value reshape(const Value& a, std::vector<int64_t> dims) {
  return a.graph().wrap(tj_graph_reshape(a.graph().get(), a.get(),
                                         static_cast<int32_t>(dims.size()),
                                         dims.data()));
}

inline Value transpose(const Value& a, std::vector<int32_t> perm) {
  if (static_cast<int32_t>(perm.size()) !=
      tj_graph_value_rank(a.graph().get(), a.get())) {
    throw Error(TJ_STATUS_INVALID_ARGUMENT,
                "transpose: perm length differs from the rank");
  }
  return a.graph().wrap(
      tj_graph_transpose(a.graph().get(), a.get(), perm.data()));
}

inline Value gelu(const Value& x, bool approximate = false) {
  return x.graph().wrap(tj_graph_gelu(x.graph().get(), x.get(), approximate));
}

inline Value softmax(const Value& x, int32_t axis = -1) {
  return x.graph().wrap(tj_graph_softmax(x.graph().get(), x.get(), axis));
}

inline Value layer_norm(const Value& x, const Value& gamma = Value(),
                        const Value& beta = Value(), double eps = 1e-5) {
  return x.graph().wrap(tj_graph_layer_norm(x.graph().get(), x.get(),
                                            gamma.get(), beta.get(), eps));
}

inline Value linear(const Value& x, const Value& w, const Value& b = Value()) {
  Graph& g = detail::same_graph(x, w);
  return g.wrap(tj_graph_linear(g.get(), x.get(), w.get(), b.get()));
}

//===----------------------------------------------------------------------===//
// Tensors: owning host arrays and views of them
//===----------------------------------------------------------------------===//

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr tj_dtype_t value = TJ_DTYPE_F32;
};
template <>
struct DTypeOf<double> {
  static constexpr tj_dtype_t value = TJ_DTYPE_F64;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr tj_dtype_t value = TJ_DTYPE_I8;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr tj_dtype_t value = TJ_DTYPE_I32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr tj_dtype_t value = TJ_DTYPE_I64;
};
template <>
struct DTypeOf<bool> {
  static constexpr tj_dtype_t value = TJ_DTYPE_BOOL;
};

// A dense row-major host array of T.
template <typename T>
class Array {
 public:
  Array() = default;
  explicit Array(std::vector<int64_t> shape)
      : shape_(std::move(shape)), data_(static_cast<size_t>(count(shape_))) {}
  Array(std::vector<int64_t> shape, std::vector<T> data)
      : shape_(std::move(shape)), data_(std::move(data)) {
    if (static_cast<int64_t>(data_.size()) != count(shape_)) {
      throw Error(TJ_STATUS_INVALID_ARGUMENT,
                  "Array: data size does not match the shape");
    }
  }

  const std::vector<int64_t>& shape() const noexcept { return shape_; }
  std::vector<T>& data() noexcept { return data_; }
  const std::vector<T>& data() const noexcept { return data_; }
  size_t size() const noexcept { return data_.size(); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

  // A tj_tensor_t over this array; valid while the array is unchanged in
  // size. (The library only reads inputs, hence the const_cast.)
  tj_tensor_t view() const {
    return tj_tensor_make(const_cast<T*>(data_.data()), DTypeOf<T>::value,
                          static_cast<int32_t>(shape_.size()), shape_.data());
  }

 private:
  static int64_t count(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<int64_t> shape_;
  std::vector<T> data_;
};

template <typename T>
tj_tensor_t view(const Array<T>& array) {
  return array.view();
}

//===----------------------------------------------------------------------===//
// Executable
//===----------------------------------------------------------------------===//

class Executable {
 public:
  Executable() = default;
  // Adopts one reference to |executable|.
  explicit Executable(tj_executable_t* executable) noexcept
      : executable_(executable) {}
  ~Executable() { tj_executable_release(executable_); }
  Executable(const Executable& other) noexcept
      : executable_(other.executable_) {
    tj_executable_retain(executable_);
  }
  Executable& operator=(const Executable& other) noexcept {
    if (this != &other) {
      tj_executable_retain(other.executable_);
      tj_executable_release(executable_);
      executable_ = other.executable_;
    }
    return *this;
  }
  Executable(Executable&& other) noexcept
      : executable_(std::exchange(other.executable_, nullptr)) {}
  Executable& operator=(Executable&& other) noexcept {
    if (this != &other) {
      tj_executable_release(executable_);
      executable_ = std::exchange(other.executable_, nullptr);
    }
    return *this;
  }

  tj_executable_t* get() const noexcept { return executable_; }
  explicit operator bool() const noexcept { return executable_ != nullptr; }

  std::vector<int64_t> output_shape(const std::vector<tj_tensor_t>& inputs,
                                    int32_t index = 0) const {
    int32_t rank = 0;
    int64_t dims[TJ_MAX_RANK];
    check(tj_executable_output_shape(executable_, inputs.data(),
                                     static_cast<int32_t>(inputs.size()), index,
                                     &rank, dims));
    return std::vector<int64_t>(dims, dims + rank);
  }

  // Load-time warm-up (tj_executable_prepare): compiles now what runs of
  // these input shapes would compile on first use. Only dtypes and shapes
  // are read (|data| may be null); no inputs: what every shape shares.
  void prepare(const std::vector<tj_tensor_t>& inputs = {}) const {
    check(tj_executable_prepare(executable_,
                                inputs.empty() ? nullptr : inputs.data(),
                                static_cast<int32_t>(inputs.size())));
  }

  void run(const std::vector<tj_tensor_t>& inputs,
           const std::vector<tj_tensor_t>& outputs) const {
    check(tj_executable_run(executable_, inputs.data(),
                            static_cast<int32_t>(inputs.size()), outputs.data(),
                            static_cast<int32_t>(outputs.size())));
  }

  // Runs a one-output graph into a fresh array shaped for these inputs.
  template <typename T>
  Array<T> run1(const std::vector<tj_tensor_t>& inputs) const {
    Array<T> out(output_shape(inputs, 0));
    run(inputs, {out.view()});
    return out;
  }

  tj_executable_stats_t stats() const {
    tj_executable_stats_t s = {};
    s.struct_size = sizeof(s);
    tj_executable_stats(executable_, &s);
    return s;
  }

 private:
  tj_executable_t* executable_ = nullptr;
};

// Finalizes |graph| and compiles it; |options| may be null (x86 defaults).
inline Executable compile(Graph& graph,
                          const tj_compile_options_t* options = nullptr) {
  graph.finalize();
  tj_executable_t* executable = nullptr;
  check(tj_compile(graph.get(), options, &executable));
  return Executable(executable);
}

inline Executable compile(Graph& graph, tj_target_t target) {
  tj_compile_options_t options;
  tj_compile_options_initialize(&options);
  options.target = target;
  return compile(graph, &options);
}

// The reference interpreter (the oracle) on a finalized graph.
inline void reference_run(const Graph& graph,
                          const std::vector<tj_tensor_t>& inputs,
                          const std::vector<tj_tensor_t>& outputs) {
  check(tj_reference_run(graph.get(), inputs.data(),
                         static_cast<int32_t>(inputs.size()), outputs.data(),
                         static_cast<int32_t>(outputs.size())));
}

}  // namespace tj

#endif  // TENSORJIT_EXAMPLES_CPP_TENSORJIT_HPP_
