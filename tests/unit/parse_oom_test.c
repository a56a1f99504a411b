// tj_graph_print / tj_graph_parse: exact round trip, every allocation
// failure (Lua memerr style: fail the Nth allocation for every N until the
// call succeeds), malformed inputs with their line:col, and robustness
// against truncated and mutated text.

#include "tests/unit/test.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

// Covers symbols, every attribute syntax, constants of several dtypes,
// optional operands and several outputs.
static const char kSample[] =
    "func @sample[B, S](%x: f32[B,S,8], %ids: i32[B,S], %t: f32[10,8]) {\n"
    "  %3 = gather %t, %ids {axis=0} : f32[B,S,8]\n"
    "  %4 = add %x, %3 : f32[B,S,8]\n"
    "  %5 = layer_norm %4, none, none {eps=1.0000000000000001e-05} : "
    "f32[B,S,8]\n"
    "  %6 = sum %5 {axes=[2] keepdims} : f32[B,S,1]\n"
    "  %7 = transpose %4 {perm=[2,0,1]} : f32[8,B,S]\n"
    "  %8 = pad %4 {low=[0,0,1] high=[0,0,2] value=0.5} : f32[B,S,11]\n"
    "  %9 = constant [1, 2.5, -3, nan, inf, -inf, -0, 9.9999461e-41] : "
    "f32[8]\n"
    "  %10 = mul %4, %9 : f32[B,S,8]\n"
    "  %11 = gelu %10 {approximate} : f32[B,S,8]\n"
    "  %12 = constant [true, false] : bool[2]\n"
    "  %13 = constant [-9223372036854775808, 9223372036854775807] : i64[2]\n"
    "  %14 = full {value=0.10000000000000001} : f64[B]\n"
    "  %15 = concat %x, %x {axis=1} : f32[B,2*S,8]\n"
    "  return %11 as \"y\", %6 as \"s\", %15 as \"c\"\n"
    "}\n";

static tj_context_t* make_context(tj_test_allocator_t* alloc) {
  tj_context_options_t options;
  tj_context_options_initialize(&options);
  options.allocator = tj_test_allocator_get(alloc);
  tj_context_t* context = NULL;
  tj_status_t status = tj_context_create(&options, &context);
  if (status) {
    tj_status_free(status);
    return NULL;
  }
  return context;
}

TEST(round_trip_exact) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  tj_context_t* context = make_context(&alloc);
  tj_graph_t* graph = NULL;
  CHECK_OK(
      tj_graph_parse(context, kSample, strlen(kSample), "sample.tj", &graph));
  char* text = NULL;
  if (graph) CHECK_OK(tj_graph_print(graph, &text));
  CHECK_STREQ(kSample, text);
  tj_graph_t* again = NULL;
  if (text) {
    CHECK_OK(tj_graph_parse(context, text, strlen(text), "again.tj", &again));
  }
  char* text2 = NULL;
  if (again) CHECK_OK(tj_graph_print(again, &text2));
  CHECK_STREQ(kSample, text2);
  tj_context_free_string(context, text);
  tj_context_free_string(context, text2);
  tj_graph_destroy(graph);
  tj_graph_destroy(again);
  tj_context_destroy(context);
  CHECK_EQ_INT(0, alloc.live_blocks);
  CHECK_EQ_INT(0, alloc.bad_frees);
}

// The text is handed over without a NUL after it, in a block of exactly its
// size, so that a read past |length| is caught by ASan.
TEST(not_nul_terminated) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  size_t n = strlen(kSample);
  char* exact = malloc(n);
  memcpy(exact, kSample, n);
  tj_graph_t* graph = NULL;
  CHECK_OK(tj_graph_parse(context, exact, n, NULL, &graph));
  tj_graph_destroy(graph);
  // Cut right after a number, a name and a keyword: each is an error, and
  // none reads past the end.
  static const char* const kCuts[] = {"value=0.5", "%ids", "return"};
  for (size_t i = 0; i < ARRAY_SIZE(kCuts); ++i) {
    size_t cut =
        (size_t)(strstr(kSample, kCuts[i]) - kSample) + strlen(kCuts[i]);
    char* part = malloc(cut);
    memcpy(part, kSample, cut);
    tj_status_t status = tj_graph_parse(context, part, cut, NULL, &graph);
    CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(status));
    CHECK(graph == NULL);
    tj_status_free(status);
    free(part);
  }
  free(exact);
  tj_context_destroy(context);
}

TEST(parse_oom_sweep) {
  long runs = 0;
  for (long fail_at = 0;; ++fail_at, ++runs) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, fail_at);
    tj_context_t* context = make_context(&alloc);
    if (!context) {  // the context's own allocation failed
      CHECK_EQ_INT(0, alloc.live_blocks);
      continue;
    }
    tj_graph_t* graph = NULL;
    tj_status_t status =
        tj_graph_parse(context, kSample, strlen(kSample), "s.tj", &graph);
    if (status) CHECK(graph == NULL);
    tj_graph_destroy(graph);
    tj_context_destroy(context);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) break;
    if (tj_status_code(status) != TJ_STATUS_OUT_OF_MEMORY) {
      fprintf(stderr, "fail_at=%ld: %s\n", fail_at, tj_status_message(status));
    }
    CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
    tj_status_free(status);
    if (fail_at > 100000) {
      CHECK(!"the parse never succeeded");
      break;
    }
  }
  CHECK(runs > 5);
}

TEST(print_oom_sweep) {
  for (long k = 0;; ++k) {
    tj_test_allocator_t alloc;
    tj_test_allocator_initialize(&alloc, -1);
    tj_context_t* context = make_context(&alloc);
    tj_graph_t* graph = NULL;
    CHECK_OK(tj_graph_parse(context, kSample, strlen(kSample), NULL, &graph));
    if (!graph) break;
    alloc.fail_at = alloc.allocations + k;
    char* text = NULL;
    tj_status_t status = tj_graph_print(graph, &text);
    if (status) {
      CHECK(text == NULL);
      CHECK_EQ_INT(TJ_STATUS_OUT_OF_MEMORY, tj_status_code(status));
      tj_status_free(status);
    } else {
      CHECK_STREQ(kSample, text);
      tj_context_free_string(context, text);
    }
    tj_graph_destroy(graph);
    tj_context_destroy(context);
    CHECK_EQ_INT(0, alloc.live_blocks);
    CHECK_EQ_INT(0, alloc.bad_frees);
    if (!status) break;
    if (k > 1000) {
      CHECK(!"the print never succeeded");
      break;
    }
  }
}

typedef struct bad_input_t {
  const char* text;
  const char* message;  // expected in the status message
} bad_input_t;

#define HEAD "func @f(%x: f32[4]) {\n"

static const bad_input_t kBadInputs[] = {
    {"", "<input>:1:1: expected 'func', found end of input"},
    {"fun @f() {\n}\n", "<input>:1:1: expected 'func', found 'fun'"},
    {"func f", "<input>:1:6: expected the function name (@name)"},
    {"func @f(%x: f33[4]) {\n", "<input>:1:13: unknown dtype 'f33'"},
    {"func @f(%x: f32[4) {\n",
     "<input>:1:18: expected ',' or ']' in the shape"},
    {"func @f(%x: f32[B]) {\n", "<input>:1:17: unknown symbol 'B'"},
    {"func @f[B, B](%x: f32[B]) {\n", "<input>:1:12: duplicate symbol 'B'"},
    {"func @f(%x: f32[4], %x: f32[4]) {\n", "1:21: duplicate input '%x'"},
    {"func @f(%0: f32[4]) {\n", "1:9: input names must be identifiers"},
    {"func @f(%x: f32[-4]) {\n", "1:17: dims must be non-negative"},
    {"func @f(%x: f32[99999999999999999999]) {\n",
     "1:17: integer out of range"},
    {"func @f(%x: f32[1,1,1,1,1,1,1,1,1]) {\n", "1:33: more than 8 dims"},
    {HEAD "  %1 = frob %x : f32[4]\n", "2:8: unknown op 'frob'"},
    {HEAD "  %1 = neg %y : f32[4]\n", "2:12: use of undefined value '%y'"},
    {HEAD "  %1 = add %x : f32[4]\n", "2:8: 'add' takes 2 operands, got 1"},
    {HEAD "  %1 = neg %x : f32[5]\n  return %1 as \"y\"\n}\n",
     "2:17: type mismatch for '%1': written f32[5], but 'neg' infers f32[4]"},
    {HEAD "  %1 = neg %x : f32[4]\n  %1 = neg %x : f32[4]\n",
     "3:3: redefinition of '%1'"},
    {HEAD "  %1 = neg %x {axis=1} : f32[4]\n",
     "2:16: unknown attribute 'axis' for 'neg'"},
    {HEAD "  %1 = sum %x : f32[]\n", "2:15: 'sum' requires attribute 'axes'"},
    {HEAD "  %1 = sum %x {axes=[0] axes=[0]} : f32[]\n",
     "2:25: duplicate attribute 'axes'"},
    {HEAD "  %1 = gelu %x {approximate=1} : f32[4]\n",
     "2:17: attribute 'approximate' is a flag"},
    {HEAD "  %1 = full {value=1e999} : f32[4]\n", "2:20: number out of range"},
    {HEAD "  %1 = full {value=1.5.2} : f32[4]\n", "2:20: malformed number"},
    {HEAD "  %1 = full {value=1"
          "00000000000000000000000000000000000000000000000000000000000000000"
          "} : f32[4]\n",
     "2:20: number too long"},
    {HEAD "  %1 = constant [1, 2] : f32[3]\n",
     "2:17: constant has 2 values but its type has 3 elements"},
    {HEAD "  %1 = constant [1, 2.5] : i32[2]\n",
     "2:21: expected an integer for i32, found '2.5'"},
    {HEAD "  %1 = constant [300] : i8[1]\n",
     "2:18: value 300 out of range for i8"},
    {HEAD "  %1 = constant [1] : bool[1]\n", "2:18: expected true or false"},
    {HEAD "  %1 = constant [70000] : f16[1]\n",
     "2:18: value '70000' out of range for f16"},
    {HEAD "  %1 = constant [1, 2 : f32[2]\n",
     "2:23: expected ',' or ']', found ':'"},
    {HEAD "  return %x as \"y\n}\n", "2:16: unterminated string"},
    {HEAD "  return %x as \"a\\00\"\n}\n", "2:18: NUL (\\00) in string"},
    {HEAD "  return %x as y\n}\n",
     "2:16: expected the output name as a quoted"},
    {HEAD "  return %x as \"y\"\n",
     "3:1: expected '}' after return, found end"},
    {HEAD "  return %x as \"y\"\n}\n}\n", "4:1: unexpected '}' after the end"},
    {HEAD "  return %x as \"y\"\n} x\n", "3:3: unexpected 'x' after the end"},
    {HEAD "}\n", "2:1: missing 'return' before '}'"},
    {HEAD "  %1 = neg %x : f32[4] %2\n",
     "2:24: expected end of line, found '%2'"},
    {HEAD "  %1 = neg %x : f32[4]\n  return %1 as \"y\", %1 as \"y\"\n}\n",
     "3:21:"},
    {HEAD "  %1 = input : f32[4]\n", "2:8: 'input' cannot appear in the body"},
    {HEAD "  %1 = neg %x : f32[4] \x01\n",
     "2:24: unexpected character '\\x01'"},
    {HEAD "  %1 = neg %x : f32[4]\n  return %1 as \"y\"\n}\n// \xff ok\n",
     NULL},
    {HEAD "  return %x as \"y\"\n}\n", NULL},
};

TEST(malformed_inputs) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  for (size_t i = 0; i < ARRAY_SIZE(kBadInputs); ++i) {
    const bad_input_t* bad = &kBadInputs[i];
    tj_graph_t* graph = NULL;
    tj_status_t status =
        tj_graph_parse(context, bad->text, strlen(bad->text), NULL, &graph);
    if (!bad->message) {
      CHECK(status == NULL);
      if (status) fprintf(stderr, "  %s\n", tj_status_message(status));
      tj_status_free(status);
      tj_graph_destroy(graph);
      continue;
    }
    CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(status));
    CHECK_CONTAINS(tj_status_message(status), bad->message);
    CHECK(graph == NULL);
    tj_status_free(status);
    tj_graph_destroy(graph);
  }
  tj_context_destroy(context);
}

TEST(embedded_nul) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  static const char kText[] = HEAD "  // a comment \0 with a NUL\n";
  tj_graph_t* graph = NULL;
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "<input>:2:16: unexpected NUL byte",
               tj_graph_parse(context, kText, sizeof(kText) - 1, NULL, &graph));
  static const char kText2[] = HEAD "  %1 = neg %x\0 : f32[4]\n";
  CHECK_STATUS(
      TJ_STATUS_INVALID_ARGUMENT, "f.tj:2:14: unexpected NUL byte",
      tj_graph_parse(context, kText2, sizeof(kText2) - 1, "f.tj", &graph));
  CHECK(graph == NULL);
  tj_context_destroy(context);
}

// An inference error keeps its code and message and gets the location.
TEST(inference_error_located) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  static const char kText[] =
      "func @f(%a: f32[4], %b: f32[5]) {\n"
      "  %2 = add %a, %b : f32[4]\n"
      "  return %2 as \"y\"\n"
      "}\n";
  tj_graph_t* graph = NULL;
  tj_status_t status =
      tj_graph_parse(context, kText, strlen(kText), "inf.tj", &graph);
  CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(status));
  CHECK_CONTAINS(tj_status_message(status), "inf.tj:2:3: ");
  CHECK_CONTAINS(tj_status_message(status), "add");
  CHECK_CONTAINS(tj_status_message(status), "f32[5]");
  tj_status_free(status);
  tj_context_destroy(context);
}

// Every prefix and many one-byte mutations of a valid text parse or fail
// cleanly; none crashes, leaks or reads out of bounds.
TEST(truncations_and_mutations) {
  tj_test_allocator_t alloc;
  tj_test_allocator_initialize(&alloc, -1);
  tj_context_t* context = make_context(&alloc);
  size_t n = strlen(kSample);
  char* buf = malloc(n);
  int ok = 0, failed = 0;
  for (size_t cut = 0; cut + 1 < n; ++cut) {  // n - 1 is valid: no final NL
    memcpy(buf, kSample, cut);
    tj_graph_t* graph = NULL;
    tj_status_t status = tj_graph_parse(context, buf, cut, NULL, &graph);
    CHECK_EQ_INT(TJ_STATUS_INVALID_ARGUMENT, tj_status_code(status));
    tj_status_free(status);
    tj_graph_destroy(graph);
  }
  static const char kBytes[] = {'\0', '\n', ' ', '%', '[', ']', ',', '-',
                                '9',  'x',  '"', '{', '}', '*', '+', '@'};
  for (size_t pos = 0; pos < n; pos += 3) {
    for (size_t b = 0; b < sizeof(kBytes); ++b) {
      memcpy(buf, kSample, n);
      buf[pos] = kBytes[b];
      tj_graph_t* graph = NULL;
      tj_status_t status = tj_graph_parse(context, buf, n, NULL, &graph);
      if (status) {
        ++failed;
        tj_status_code_t code = tj_status_code(status);
        CHECK(code == TJ_STATUS_INVALID_ARGUMENT ||
              code == TJ_STATUS_UNSUPPORTED);
        CHECK(graph == NULL);
      } else {
        ++ok;
        char* text = NULL;
        CHECK_OK(tj_graph_print(graph, &text));
        tj_context_free_string(context, text);
      }
      tj_status_free(status);
      tj_graph_destroy(graph);
    }
  }
  CHECK(ok > 0 && failed > 0);
  free(buf);
  tj_context_destroy(context);
  CHECK_EQ_INT(0, alloc.live_blocks);
}

// The printer works on unfinished graphs built in C, numbers body nodes
// after the inputs even when an input came late, and refuses a graph with
// a recorded error.
TEST(print_builder_graphs) {
  tj_context_t* context = NULL;
  CHECK_OK(tj_context_create(NULL, &context));
  tj_graph_t* g = NULL;
  CHECK_OK(tj_graph_create(context, "late", &g));
  int64_t dims[1] = {4};
  tj_value_t a = tj_graph_input(g, TJ_DTYPE_F32, 1, dims, "a");
  tj_value_t r = tj_graph_relu(g, a);
  tj_value_t b = tj_graph_input(g, TJ_DTYPE_F32, 1, dims, "b");
  tj_value_t s = tj_graph_add(g, r, b);
  (void)s;
  char* text = NULL;
  CHECK_OK(tj_graph_print(g, &text));
  CHECK_STREQ(
      "func @late(%a: f32[4], %b: f32[4]) {\n"
      "  %2 = relu %a : f32[4]\n"
      "  %3 = add %2, %b : f32[4]\n"
      "  return\n"
      "}\n",
      text);
  tj_context_free_string(context, text);
  tj_graph_output(g, s, "out");
  CHECK_OK(tj_graph_print(g, &text));
  tj_graph_t* parsed = NULL;
  if (text) {
    CHECK_OK(tj_graph_parse(context, text, strlen(text), NULL, &parsed));
  }
  char* text2 = NULL;
  if (parsed) CHECK_OK(tj_graph_print(parsed, &text2));
  CHECK_STREQ(text, text2);
  tj_context_free_string(context, text);
  tj_context_free_string(context, text2);
  tj_graph_destroy(parsed);

  int64_t five[1] = {5};
  tj_value_t c = tj_graph_input(g, TJ_DTYPE_F32, 1, five, "c");
  tj_graph_add(g, a, c);  // records a shape error
  text = (char*)"unchanged";
  CHECK_STATUS(TJ_STATUS_INVALID_ARGUMENT, "recorded error",
               tj_graph_print(g, &text));
  CHECK(text == NULL);
  tj_graph_destroy(g);
  tj_context_destroy(context);
}

int main(void) {
  RUN_TEST(round_trip_exact);
  RUN_TEST(not_nul_terminated);
  RUN_TEST(parse_oom_sweep);
  RUN_TEST(print_oom_sweep);
  RUN_TEST(malformed_inputs);
  RUN_TEST(embedded_nul);
  RUN_TEST(inference_error_located);
  RUN_TEST(truncations_and_mutations);
  RUN_TEST(print_builder_graphs);
  TEST_MAIN_END();
}
