// tj-reduce: a minifier for failing graphs.
//
//   tj-reduce [--target=x86|reference|cuda] [--seed=N] [--no-edge-values]
//             [--error | --crash | --command=CMD] [--func NAME]
//             [-o OUT.tj] FILE.tj|FILE.onnx [--sym NAME=VALUE]...
//
// shrinks a graph while a predicate still holds, to a fixed point, and
// writes the reduced graph as .tj (default FILE.reduced.tj). The
// predicate, on each candidate:
//  - default: tj_verify finds a mismatch (a verdict other than clean and
//    drift) on the target, with random inputs of --seed and the --sym
//    values (tj_verify_options_t's mix); a candidate that fails to compile
//    or run is not interesting (another bug);
//  - --error: compiling or verifying it fails with the status code the
//    original fails with;
//  - --crash: a child process that compiles and runs it dies by a signal;
//  - --command=CMD: the shell command "CMD FILE.tj" (the candidate written
//    to a temporary file) exits nonzero.
// The reductions, each kept when the predicate still holds, repeated until
// none is:
//  - drop an output (while more than one);
//  - cut nodes: a set of nodes (halves, quarters, ... single nodes) becomes
//    new inputs of the same types, so that what only fed them goes;
//  - bypass a node: its uses read one of its operands of the same type;
//  - halve the concrete dims of the types (every dim of one size at once,
//    f32[B,8] -> f32[B,4]; a candidate whose attributes still need the old
//    size does not parse and is not kept);
//  - shrink the symbols: each --sym value to 1, else halved;
//  - (constants are nodes: cutting one replaces it with an input.)
// It writes the inputs the reduced graph fails on beside it
// (OUT.inputs.npz: one NAME.npy per input, np.load reads it; the random
// inputs of --seed and the shrunk symbols) and prints the sizes before and
// after and the command that reproduces the failure with both files
// (tj-run --verify --target=T --inputs OUT.inputs.npz OUT.tj).
//
// The core (tj_reduce) is also compiled into tests/unit/verify_reduce_test.c
// (with TJ_REDUCE_NO_MAIN), which plants a wrong kernel behind the
// predicate.

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/verify.h"
#include "lib/ir.h"
#include "lib/passes/pass.h"
#include "tensorjit.h"

enum { kReduceMaxSyms = 64 };

typedef enum reduce_mode_e {
  REDUCE_MISMATCH = 0,
  REDUCE_ERROR = 1,
  REDUCE_CRASH = 2,
  REDUCE_COMMAND = 3,
} reduce_mode_t;

typedef struct tj_reduce_t {
  reduce_mode_t mode;
  tj_target_t target;
  uint64_t seed;
  bool edge_values;
  const char* command;  // REDUCE_COMMAND
  int32_t num_syms;
  char** names;
  int64_t* values;  // shrunk in place
  // How candidates are compiled (NULL: tj_compile); the test hook that
  // plants a wrong kernel.
  tj_status_t (*compile)(void* user, const tj_graph_t* graph,
                         const tj_compile_options_t* options,
                         tj_executable_t** out_executable);
  void* compile_user;
  tj_status_code_t error_code;  // REDUCE_ERROR: the original's
  int64_t tests;                // predicate calls
  bool verbose;
} tj_reduce_t;

//===--- the predicate ---===//

// Compiles |g| and verifies it: the verdict in |*out_verdict|, or the
// status that kept it from being compared.
static tj_status_t compile_and_verify(tj_reduce_t* r, const tj_graph_t* g,
                                      tj_verify_verdict_t* out_verdict) {
  tj_compile_options_t o;
  tj_compile_options_initialize(&o);
  o.target = r->target;
  tj_executable_t* exe = NULL;
  tj_status_t status = r->compile ? r->compile(r->compile_user, g, &o, &exe)
                                  : tj_compile(g, &o, &exe);
  if (status) return status;
  tj_verify_options_t vo;
  tj_verify_options_initialize(&vo);
  vo.num_symbols = r->num_syms;
  vo.symbol_names = (const char* const*)r->names;
  vo.symbol_values = r->values;
  vo.seed = r->seed;
  vo.edge_values = r->edge_values;
  vo.unfused = false;
  tj_verify_report_t* report = NULL;
  status = tj_verify(exe, g, NULL, 0, &vo, &report);
  if (!status) *out_verdict = report->verdict;
  tj_verify_report_destroy(report);
  tj_executable_release(exe);
  return status;
}

static bool verdict_fails(tj_verify_verdict_t v) {
  return v != TJ_VERIFY_CLEAN && v != TJ_VERIFY_DRIFT;
}

static bool run_command(tj_reduce_t* r, const tj_graph_t* g) {
  char* text = NULL;
  tj_status_t status = tj_graph_print(g, &text);
  if (status) {
    tj_status_free(status);
    return false;
  }
  char path[] = "/tmp/tj-reduce-XXXXXX.tj";
  int fd = mkstemps(path, 3);
  bool interesting = false;
  if (fd >= 0) {
    size_t len = strlen(text);
    bool ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    char* cmd = ok ? malloc(strlen(r->command) + strlen(path) + 4) : NULL;
    if (cmd) {
      sprintf(cmd, "%s '%s'", r->command, path);
      int rc = system(cmd);
      interesting = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) != 0;
      free(cmd);
    }
    unlink(path);
  }
  tj_context_free_string(tj_graph_context(g), text);
  return interesting;
}

static bool run_crash(tj_reduce_t* r, const tj_graph_t* g) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    tj_verify_verdict_t v;
    tj_status_t status = compile_and_verify(r, g, &v);
    tj_status_free(status);
    _exit(0);
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(ws);
}

// Whether |g| still shows the failure.
static bool interesting(tj_reduce_t* r, const tj_graph_t* g) {
  ++r->tests;
  switch (r->mode) {
    case REDUCE_COMMAND:
      return run_command(r, g);
    case REDUCE_CRASH:
      return run_crash(r, g);
    case REDUCE_ERROR:
    case REDUCE_MISMATCH:
      break;
  }
  tj_verify_verdict_t v = TJ_VERIFY_CLEAN;
  tj_status_t status = compile_and_verify(r, g, &v);
  bool yes;
  if (r->mode == REDUCE_ERROR) {
    yes = status && tj_status_code(status) == r->error_code;
  } else {
    yes = !status && verdict_fails(v);
  }
  tj_status_free(status);
  return yes;
}

//===--- candidates ---===//

enum { kKeep = 0, kCut = 1, kBypass = 2 };

// A copy of |src| where node i is kept, cut (a new input of its type) or
// bypassed (its uses read operand bypass[i]), with only the outputs
// |keep_out| marks and only what they need.
static tj_status_t rebuild(const tj_graph_t* src, const uint8_t* action,
                           const uint8_t* bypass, const bool* keep_out,
                           tj_graph_t** out) {
  *out = NULL;
  uint32_t n = src->num_nodes;
  bool* live = calloc(n ? n : 1, sizeof(bool));
  uint32_t* outs =
      calloc(src->num_outputs ? src->num_outputs : 1, sizeof(uint32_t));
  const char** out_names =
      calloc(src->num_outputs ? src->num_outputs : 1, sizeof(char*));
  if (!live || !outs || !out_names) {
    free(live);
    free(outs);
    free(out_names);
    return tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "tj-reduce: out of memory");
  }
  for (uint32_t o = 0; o < src->num_outputs; ++o) {
    if (keep_out[o]) live[src->outputs[o].node] = true;
  }
  for (uint32_t i = n; i-- > 0;) {
    if (!live[i]) continue;
    const tj_node_t* node = &src->nodes[i];
    if (action[i] == kCut) continue;
    if (action[i] == kBypass) {
      live[node->operands[bypass[i]]] = true;
      continue;
    }
    for (uint32_t k = 0; k < node->num_operands; ++k) {
      if (node->operands[k] != TJ_NODE_NONE) live[node->operands[k]] = true;
    }
  }
  tj_rewriter_t rw;
  tj_status_t status = tj_rewriter_begin_bare(&rw, src);
  for (uint32_t i = 0; !status && i < n; ++i) {
    if (!live[i]) continue;
    const tj_node_t* node = &src->nodes[i];
    if (node->op == TJ_OP_INPUT || action[i] == kCut) {
      char name[64];
      if (node->op == TJ_OP_INPUT) {
        snprintf(name, sizeof(name), "%s", node->attrs.name);
      } else {
        // A name no input of |src| has.
        for (uint32_t suffix = 0;; ++suffix) {
          snprintf(name, sizeof(name), "cut%u%.*s", i, (int)suffix,
                   "________________");
          bool taken = false;
          for (uint32_t j = 0; j < src->num_inputs && !taken; ++j) {
            taken = strcmp(src->nodes[src->inputs[j]].attrs.name, name) == 0;
          }
          if (!taken || suffix >= 16) break;
        }
      }
      int64_t dims[TJ_MAX_RANK];
      tj_node_desc_t desc;
      memset(&desc, 0, sizeof(desc));
      desc.op = TJ_OP_INPUT;
      desc.dtype = node->dtype;
      desc.rank = node->rank;
      desc.dims = dims;
      desc.attrs.name = name;
      status = tj_rewriter_dims(&rw, node->rank, node->dims, dims);
      if (!status) status = tj_rewriter_append(&rw, &desc, &rw.map[i]);
    } else if (action[i] == kBypass) {
      rw.map[i] = rw.map[node->operands[bypass[i]]];
    } else {
      status = tj_rewriter_clone(&rw, i);
    }
  }
  uint32_t num_out = 0;
  for (uint32_t o = 0; !status && o < src->num_outputs; ++o) {
    if (!keep_out[o]) continue;
    outs[num_out] = rw.map[src->outputs[o].node];
    out_names[num_out++] = src->outputs[o].name;
  }
  if (!status) {
    status =
        tj_rewriter_finish_outputs(&rw, false, num_out, outs, out_names, out);
  } else {
    tj_rewriter_abandon(&rw);
  }
  free(live);
  free(outs);
  free(out_names);
  return status;
}

// Per-node and per-output choices for one candidate of |g|, all "keep".
typedef struct choice_t {
  uint8_t* action;
  uint8_t* bypass;
  bool* keep_out;
} choice_t;

static bool choice_init(choice_t* c, const tj_graph_t* g) {
  c->action = calloc(g->num_nodes ? g->num_nodes : 1, 1);
  c->bypass = calloc(g->num_nodes ? g->num_nodes : 1, 1);
  c->keep_out = calloc(g->num_outputs ? g->num_outputs : 1, sizeof(bool));
  if (!c->action || !c->bypass || !c->keep_out) return false;
  for (uint32_t o = 0; o < g->num_outputs; ++o) c->keep_out[o] = true;
  return true;
}

static void choice_free(choice_t* c) {
  free(c->action);
  free(c->bypass);
  free(c->keep_out);
  memset(c, 0, sizeof(*c));
}

// Builds the candidate of |*g| that |c| describes and, when it is smaller
// or simpler and still interesting, makes it |*g|. Whether it did.
static bool try_candidate(tj_reduce_t* r, tj_graph_t** g, const choice_t* c) {
  tj_graph_t* cand = NULL;
  tj_status_t status = rebuild(*g, c->action, c->bypass, c->keep_out, &cand);
  if (status) {
    tj_status_free(status);
    return false;
  }
  if (!interesting(r, cand)) {
    tj_graph_destroy(cand);
    return false;
  }
  tj_graph_destroy(*g);
  *g = cand;
  return true;
}

static bool same_type(const tj_graph_t* g, uint32_t a, uint32_t b) {
  const tj_node_t* x = &g->nodes[a];
  const tj_node_t* y = &g->nodes[b];
  if (x->dtype != y->dtype || x->rank != y->rank) return false;
  for (int32_t d = 0; d < x->rank; ++d) {
    if (x->dims[d] != y->dims[d]) return false;
  }
  return true;
}

static uint32_t count_ops(const tj_graph_t* g) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < g->num_nodes; ++i) {
    n += g->nodes[i].op != TJ_OP_INPUT;
  }
  return n;
}

// Whether the identifier that ends before text[at] (a '[') is a dtype's
// name: the bracket opens a type's dims.
static bool opens_type(const char* text, size_t at) {
  size_t start = at;
  while (start > 0 &&
         (isalnum((unsigned char)text[start - 1]) || text[start - 1] == '_')) {
    --start;
  }
  for (int k = 0; k < TJ_DTYPE_COUNT_; ++k) {
    const char* name = tj_dtype_name((tj_dtype_t)k);
    if (strlen(name) == at - start &&
        memcmp(text + start, name, at - start) == 0)
      return true;
  }
  return false;
}

// |text| with every concrete dim |from| of a type ("f32[B,8]": the 8) as
// |to|, or with |to| 0 the largest concrete dim above 1 that is less than
// |from| (0 when none) in |*out_largest| and NULL. malloc'd.
static char* text_with_dim(const char* text, int64_t from, int64_t to,
                           int64_t* out_largest) {
  size_t len = strlen(text);
  char* out = to ? malloc(len * 2 + 1) : NULL;
  if (to && !out) return NULL;
  size_t o = 0;
  bool in_type = false;
  int64_t largest = 0;
  for (size_t i = 0; i < len;) {
    char c = text[i];
    if (c == '[' && opens_type(text, i)) in_type = true;
    if (c == ']') in_type = false;
    bool token_start =
        in_type && isdigit((unsigned char)c) &&
        (text[i - 1] == '[' || text[i - 1] == ',' || text[i - 1] == ' ');
    if (token_start) {
      size_t j = i;
      while (j < len && isdigit((unsigned char)text[j])) ++j;
      if (text[j] == ',' || text[j] == ']') {
        long long v = strtoll(text + i, NULL, 10);
        if (!to && v > 1 && v < from && v > largest) largest = v;
        if (to && v == from) {
          o += (size_t)sprintf(out + o, "%lld", (long long)to);
        } else if (to) {
          memcpy(out + o, text + i, j - i);
          o += j - i;
        }
        i = j;
        continue;
      }
    }
    if (to) out[o++] = c;
    ++i;
  }
  if (to) out[o] = '\0';
  if (out_largest) *out_largest = largest;
  return out;
}

// Halves the concrete dims of the types (every dim of one size at once,
// so that the dims that must agree still do), each while the predicate
// holds; whether any was kept. A candidate whose attributes still name
// the old size does not parse and is not kept.
static bool shrink_dims(tj_reduce_t* r, tj_graph_t** g) {
  bool progress = false;
  char* text = NULL;
  for (int64_t from = INT64_MAX;;) {
    tj_status_t status = tj_graph_print(*g, &text);
    if (status) {
      tj_status_free(status);
      break;
    }
    int64_t size = 0;
    text_with_dim(text, from, 0, &size);
    char* cand_text = size ? text_with_dim(text, size, size / 2, NULL) : NULL;
    tj_graph_t* cand = NULL;
    if (cand_text) {
      status = tj_graph_parse(tj_graph_context(*g), cand_text,
                              strlen(cand_text), "reduce.tj", &cand);
      tj_status_free(status);
    }
    if (cand && interesting(r, cand)) {
      tj_graph_destroy(*g);
      *g = cand;
      progress = true;
    } else {
      tj_graph_destroy(cand);
    }
    free(cand_text);
    tj_context_free_string(tj_graph_context(*g), text);
    text = NULL;
    if (!size) break;
    // The next size down (|size| / 2 when it was kept: halved again).
    from = size;
  }
  return progress;
}

// One sweep of every reduction; whether any was kept.
static bool sweep(tj_reduce_t* r, tj_graph_t** g) {
  bool progress = false;
  choice_t c;
  // Outputs, one at a time.
  for (uint32_t o = 0; (*g)->num_outputs > 1 && o < (*g)->num_outputs;) {
    if (!choice_init(&c, *g)) break;
    c.keep_out[o] = false;
    bool kept = try_candidate(r, g, &c);
    choice_free(&c);
    if (kept) {
      progress = true;
    } else {
      ++o;
    }
  }
  // Cuts: chunks of the non-input nodes, halving down to single nodes.
  uint32_t ops = count_ops(*g);
  for (uint32_t chunk = ops > 1 ? ops / 2 : 1;; chunk /= 2) {
    if (chunk == 0) chunk = 1;
    for (uint32_t start = 0; start < count_ops(*g);) {
      if (!choice_init(&c, *g)) return progress;
      uint32_t seen = 0, cut = 0;
      for (uint32_t i = 0; i < (*g)->num_nodes; ++i) {
        if ((*g)->nodes[i].op == TJ_OP_INPUT) continue;
        if (seen >= start && seen < start + chunk) {
          c.action[i] = kCut;
          ++cut;
        }
        ++seen;
      }
      bool kept = cut > 0 && try_candidate(r, g, &c);
      choice_free(&c);
      if (kept) {
        progress = true;
      } else {
        start += chunk;
      }
    }
    if (chunk == 1) break;
  }
  // Bypasses: a node's uses read an operand of its type.
  for (uint32_t i = 0; i < (*g)->num_nodes; ++i) {
    const tj_node_t* node = &(*g)->nodes[i];
    if (node->op == TJ_OP_INPUT) continue;
    for (uint32_t k = 0; k < node->num_operands && k < 255; ++k) {
      uint32_t operand = (*g)->nodes[i].operands[k];
      if (operand == TJ_NODE_NONE || !same_type(*g, i, operand)) continue;
      if (!choice_init(&c, *g)) return progress;
      c.action[i] = kBypass;
      c.bypass[i] = (uint8_t)k;
      bool kept = try_candidate(r, g, &c);
      choice_free(&c);
      if (kept) {
        progress = true;
        break;  // node i is another node now
      }
    }
  }
  // Concrete dims: halved.
  if (shrink_dims(r, g)) progress = true;
  // Symbols: to 1, else halved.
  for (int32_t s = 0; s < r->num_syms; ++s) {
    int64_t before = r->values[s];
    if (before <= 1) continue;
    const int64_t tries[2] = {1, before / 2};
    for (int t = 0; t < 2; ++t) {
      if (tries[t] >= r->values[s] || (t == 1 && tries[1] == 1)) continue;
      r->values[s] = tries[t];
      if (interesting(r, *g)) {
        progress = true;
        break;
      }
      r->values[s] = before;
    }
  }
  return progress;
}

// Reduces |*graph| (owned; replaced by the reduced graph) to a fixed point
// of the reductions. INVALID_ARGUMENT when the original is not interesting.
static tj_status_t tj_reduce(tj_reduce_t* r, tj_graph_t** graph) {
  if (r->mode == REDUCE_ERROR) {
    tj_verify_verdict_t v;
    tj_status_t status = compile_and_verify(r, *graph, &v);
    if (!status) {
      return tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                            "tj-reduce: --error: @%s compiles and runs",
                            (*graph)->name);
    }
    r->error_code = tj_status_code(status);
    tj_status_free(status);
  }
  if (!interesting(r, *graph)) {
    return tj_status_make(
        TJ_STATUS_INVALID_ARGUMENT,
        "tj-reduce: @%s does not fail the predicate to begin with",
        (*graph)->name);
  }
  for (int round = 0; round < 64; ++round) {
    if (r->verbose) {
      fprintf(stderr, "tj-reduce: round %d: %u nodes, %lld tests\n", round,
              (*graph)->num_nodes, (long long)r->tests);
    }
    if (!sweep(r, graph)) break;
  }
  return NULL;
}

#ifndef TJ_REDUCE_NO_MAIN

#include "tools/tool_io.h"
#include "tools/tool_npz.h"

static void usage(FILE* out) {
  fprintf(out,
          "usage: tj-reduce [--target=x86|reference|cuda] [--seed=N]"
          " [--no-edge-values]\n"
          "                 [--error | --crash | --command=CMD]"
          " [--func NAME] [-o OUT.tj] [-v]\n"
          "                 FILE.tj|FILE.onnx [--sym NAME=VALUE]...\n"
          "Shrinks a failing graph while it still fails, and writes it as\n"
          ".tj (default FILE.reduced.tj). It fails when tj_verify finds a\n"
          "mismatch (default; random inputs of --seed and the --sym\n"
          "values), when compiling or running fails with the original's\n"
          "status (--error), when a child process compiling and running it\n"
          "dies by a signal (--crash), or when 'CMD FILE.tj' exits nonzero\n"
          "(--command=CMD). Reductions: drop outputs, cut nodes into new\n"
          "inputs of the same type, bypass nodes, halve concrete dims,\n"
          "shrink the symbols. The inputs it fails on go beside it as\n"
          "OUT.inputs.npz (tj-run --inputs reads them); it prints the\n"
          "command that reproduces the failure.\n");
}

typedef struct main_args_t {
  tj_context_t* context;
  const char* path;
  const char* func;
  tj_graph_t* graph;  // the first function, or @func
  tj_status_t status;
} main_args_t;

static bool take_piece(const char* text, size_t length, void* user) {
  main_args_t* a = user;
  if (a->graph || a->status) return true;
  tj_graph_t* g = NULL;
  tj_status_t status =
      tj_tool_load_graph(a->context, text, length, a->path, &g);
  if (status) {
    a->status = status;
    return false;
  }
  if (a->func && strcmp(tj_graph_name(g), a->func) != 0) {
    tj_graph_destroy(g);
    return true;
  }
  a->graph = g;
  return true;
}

// Writes the inputs the predicate ran the reduced graph |g| on (random, of
// |r|'s seed and symbol values, as tj_verify makes them) to |path| as .npz
// (NAME.npy per input, what tj-run --inputs reads).
static tj_status_t write_inputs(const tj_reduce_t* r, const tj_graph_t* g,
                                const char* path) {
  int64_t sym[TJ_MAX_SYMBOLS];
  tj_verify_tensors_t in;
  memset(&in, 0, sizeof(in));
  in.allocator = tj_context_allocator(tj_graph_context(g));
  tj_status_t status = tj_verify_bind_names(
      g, r->num_syms, (const char* const*)r->names, r->values, sym);
  if (!status) {
    status =
        tj_verify_random_inputs(g, sym, r->seed, r->edge_values, false, &in);
  }
  const char** input_names =
      status ? NULL : calloc((size_t)in.count + 1, sizeof(char*));
  if (!status && !input_names) {
    status =
        tj_status_make(TJ_STATUS_OUT_OF_MEMORY, "tj-reduce: out of memory");
  }
  for (int32_t i = 0; !status && i < in.count; ++i) {
    input_names[i] = tj_graph_input_name(g, i);
  }
  if (!status) {
    status = tj_tool_npz_write(path, input_names, in.tensors, in.count);
  }
  free(input_names);
  tj_verify_tensors_deinitialize(&in);
  return status;
}

static const char* target_name(tj_target_t t) {
  return t == TJ_TARGET_REFERENCE ? "reference"
         : t == TJ_TARGET_CUDA    ? "cuda"
                                  : "x86";
}

int main(int argc, char** argv) {
  tj_reduce_t r;
  memset(&r, 0, sizeof(r));
  r.target = TJ_TARGET_X86;
  r.seed = 1;
  r.edge_values = true;
  char* names[kReduceMaxSyms];
  int64_t values[kReduceMaxSyms];
  r.names = names;
  r.values = values;
  const char* path = NULL;
  const char* func = NULL;
  const char* out_path = NULL;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strncmp(a, "--target=", 9) == 0) {
      const char* t = a + 9;
      if (strcmp(t, "x86") == 0) {
        r.target = TJ_TARGET_X86;
      } else if (strcmp(t, "reference") == 0) {
        r.target = TJ_TARGET_REFERENCE;
      } else if (strcmp(t, "cuda") == 0) {
        r.target = TJ_TARGET_CUDA;
      } else {
        fprintf(stderr, "tj-reduce: --target wants x86, reference or cuda\n");
        return 1;
      }
    } else if (strncmp(a, "--seed=", 7) == 0) {
      char* end = NULL;
      long long v = strtoll(a + 7, &end, 10);
      if (end == a + 7 || *end || v < 0) {
        fprintf(stderr, "tj-reduce: --seed wants a number >= 0\n");
        return 1;
      }
      r.seed = (uint64_t)v;
    } else if (strcmp(a, "--no-edge-values") == 0) {
      r.edge_values = false;
    } else if (strcmp(a, "--error") == 0) {
      r.mode = REDUCE_ERROR;
    } else if (strcmp(a, "--crash") == 0) {
      r.mode = REDUCE_CRASH;
    } else if (strncmp(a, "--command=", 10) == 0 && a[10]) {
      r.mode = REDUCE_COMMAND;
      r.command = a + 10;
    } else if (strcmp(a, "-v") == 0) {
      r.verbose = true;
    } else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (strcmp(a, "--func") == 0 && i + 1 < argc) {
      func = argv[++i];
      if (func[0] == '@') ++func;
    } else if (strcmp(a, "--sym") == 0 || strncmp(a, "--sym=", 6) == 0) {
      const char* spec =
          a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      const char* eq = spec ? strchr(spec, '=') : NULL;
      char* end = NULL;
      long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
      if (!eq || eq == spec || !end || *end || end == eq + 1 || v < 0 ||
          r.num_syms == kReduceMaxSyms) {
        fprintf(stderr, "tj-reduce: --sym wants NAME=VALUE, got '%s'\n",
                spec ? spec : "");
        return 1;
      }
      names[r.num_syms] = strndup(spec, (size_t)(eq - spec));
      values[r.num_syms++] = v;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "tj-reduce: unknown option '%s'\n", a);
      usage(stderr);
      return 1;
    } else if (path) {
      fprintf(stderr, "tj-reduce: more than one input file\n");
      return 1;
    } else {
      path = a;
    }
  }
  if (!path) {
    usage(stderr);
    return 1;
  }
  char default_out[4096];
  if (!out_path) {
    size_t len = strlen(path);
    const char* dot = strrchr(path, '.');
    size_t stem = dot && !strchr(dot, '/') ? (size_t)(dot - path) : len;
    snprintf(default_out, sizeof(default_out), "%.*s.reduced.tj", (int)stem,
             path);
    out_path = default_out;
  }
  size_t length = 0;
  char* text = tj_tool_read_file("tj-reduce", path, &length);
  if (!text) return 1;
  int rc = 0;
  tj_context_t* context = NULL;
  tj_status_t status = tj_context_create(NULL, &context);
  main_args_t args = {context, path, func, NULL, NULL};
  if (!status) {
    tj_tool_for_each_piece("tj-reduce", text, length, !tj_tool_is_onnx(path),
                           take_piece, &args);
    status = args.status;
    if (!status && !args.graph) {
      status = tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                              "tj-reduce: %s has no function%s%s", path,
                              func ? " @" : "", func ? func : "");
    }
  }
  uint32_t nodes_before = args.graph ? args.graph->num_nodes : 0;
  uint32_t ops_before = args.graph ? count_ops(args.graph) : 0;
  if (!status) status = tj_reduce(&r, &args.graph);
  char* printed = NULL;
  if (!status) status = tj_graph_print(args.graph, &printed);
  if (!status) {
    FILE* f = fopen(out_path, "w");
    if (!f || fputs(printed, f) < 0 || fclose(f) != 0) {
      status = tj_status_make(TJ_STATUS_INVALID_ARGUMENT,
                              "tj-reduce: cannot write '%s'", out_path);
    }
  }
  char inputs_path[4096];
  if (!status) {
    size_t len = strlen(out_path);
    size_t stem =
        len > 3 && strcmp(out_path + len - 3, ".tj") == 0 ? len - 3 : len;
    snprintf(inputs_path, sizeof(inputs_path), "%.*s.inputs.npz", (int)stem,
             out_path);
    status = write_inputs(&r, args.graph, inputs_path);
  }
  if (!status) {
    printf("reduced @%s: %u nodes (%u ops) -> %u nodes (%u ops), %lld tests\n",
           tj_graph_name(args.graph), nodes_before, ops_before,
           args.graph->num_nodes, count_ops(args.graph), (long long)r.tests);
    printf("wrote %s and %s\n", out_path, inputs_path);
    printf("reproduce: ");
    if (r.mode == REDUCE_COMMAND) {
      printf("%s %s\n", r.command, out_path);
    } else {
      printf("tj-run --verify --target=%s --inputs %s %s\n",
             target_name(r.target), inputs_path, out_path);
    }
    printf("(the inputs: random, seed %llu%s", (unsigned long long)r.seed,
           r.edge_values ? ", edge values" : "");
    for (int32_t s = 0; s < r.num_syms; ++s) {
      printf(", %s=%lld", names[s], (long long)values[s]);
    }
    printf(")\n");
  }
  if (status) {
    fprintf(stderr, "%s\n", tj_status_message(status));
    tj_status_free(status);
    rc = 1;
  }
  tj_context_free_string(context, printed);
  tj_graph_destroy(args.graph);
  tj_context_destroy(context);
  for (int32_t s = 0; s < r.num_syms; ++s) free(names[s]);
  free(text);
  return rc;
}

#endif  // TJ_REDUCE_NO_MAIN
