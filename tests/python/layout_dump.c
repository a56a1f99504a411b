// Prints the layout of every public struct that python/tensorjit/_lib.py
// mirrors with ctypes, one line each: "NAME SIZE" for a struct and
// "NAME.FIELD OFFSET SIZE" for a field (nested structs as NAME.A.B).
// test_layout.py compares it with the ctypes classes.

#include <stddef.h>
#include <stdio.h>

#include "tensorjit.h"

#define STRUCT(T) printf("%s %zu\n", #T, sizeof(T))
#define FIELD(T, F) \
  printf("%s.%s %zu %zu\n", #T, #F, offsetof(T, F), sizeof(((T*)0)->F))

int main(void) {
  STRUCT(tj_value_t);
  FIELD(tj_value_t, id);

  STRUCT(tj_tensor_t);
  FIELD(tj_tensor_t, data);
  FIELD(tj_tensor_t, device_type);
  FIELD(tj_tensor_t, device_id);
  FIELD(tj_tensor_t, dtype);
  FIELD(tj_tensor_t, rank);
  FIELD(tj_tensor_t, shape);
  FIELD(tj_tensor_t, strides);
  FIELD(tj_tensor_t, byte_offset);

  STRUCT(tj_allocator_t);
  FIELD(tj_allocator_t, fn);
  FIELD(tj_allocator_t, user_data);

  STRUCT(tj_context_options_t);
  FIELD(tj_context_options_t, struct_size);
  FIELD(tj_context_options_t, allocator);
  FIELD(tj_context_options_t, allocator.fn);
  FIELD(tj_context_options_t, allocator.user_data);
  FIELD(tj_context_options_t, diagnostic_fn);
  FIELD(tj_context_options_t, diagnostic_user_data);
  FIELD(tj_context_options_t, log);
  FIELD(tj_context_options_t, print_after);
  FIELD(tj_context_options_t, dump_dir);
  FIELD(tj_context_options_t, x86_isa);
  FIELD(tj_context_options_t, cache_dir);
  FIELD(tj_context_options_t, openblas);
  FIELD(tj_context_options_t, cuda_gemm_candidate);
  FIELD(tj_context_options_t, retain_compiled);

  STRUCT(tj_compile_options_t);
  FIELD(tj_compile_options_t, struct_size);
  FIELD(tj_compile_options_t, target);
  FIELD(tj_compile_options_t, specialize);
  FIELD(tj_compile_options_t, specialize_after);
  FIELD(tj_compile_options_t, bucket_pow2);
  FIELD(tj_compile_options_t, autotune);
  FIELD(tj_compile_options_t, cache_dir);
  FIELD(tj_compile_options_t, pipeline);
  FIELD(tj_compile_options_t, verify_each);
  FIELD(tj_compile_options_t, x86);
  FIELD(tj_compile_options_t, x86.num_threads);
  FIELD(tj_compile_options_t, x86.parallel_for);
  FIELD(tj_compile_options_t, x86.parallel_for_user_data);
  FIELD(tj_compile_options_t, x86.autotune_budget_ms);
  FIELD(tj_compile_options_t, cuda);
  FIELD(tj_compile_options_t, cuda.device);
  FIELD(tj_compile_options_t, cuda.stream);
  FIELD(tj_compile_options_t, cuda.disable_graphs);
  FIELD(tj_compile_options_t, cuda.precise_math);
  FIELD(tj_compile_options_t, cuda.allow_tf32);
  FIELD(tj_compile_options_t, unfused);
  FIELD(tj_compile_options_t, bisect);

  STRUCT(tj_executable_stats_t);
  FIELD(tj_executable_stats_t, struct_size);
  FIELD(tj_executable_stats_t, num_kernels);
  FIELD(tj_executable_stats_t, num_graph_breaks);
  FIELD(tj_executable_stats_t, compile_ms);
  FIELD(tj_executable_stats_t, cache_hits);
  FIELD(tj_executable_stats_t, cache_misses);
  FIELD(tj_executable_stats_t, recompiles);
  FIELD(tj_executable_stats_t, runs);
  FIELD(tj_executable_stats_t, num_host_calls);
  STRUCT(tj_custom_attrs_t);
  FIELD(tj_custom_attrs_t, num_ints);
  FIELD(tj_custom_attrs_t, ints);
  FIELD(tj_custom_attrs_t, num_floats);
  FIELD(tj_custom_attrs_t, floats);
  FIELD(tj_executable_stats_t, passes_ms);
  FIELD(tj_executable_stats_t, lowering_ms);
  FIELD(tj_executable_stats_t, llvm_ms);
  FIELD(tj_executable_stats_t, ptxas_ms);
  FIELD(tj_executable_stats_t, tuning_ms);
  FIELD(tj_executable_stats_t, cache_load_ms);
  FIELD(tj_executable_stats_t, run_ms);
  FIELD(tj_executable_stats_t, num_shared_kernels);
  FIELD(tj_executable_stats_t, device_reserved_bytes);
  FIELD(tj_executable_stats_t, device_allocated_bytes);
  FIELD(tj_executable_stats_t, device_peak_reserved_bytes);
  FIELD(tj_executable_stats_t, device_peak_allocated_bytes);
  FIELD(tj_executable_stats_t, device_arena_bytes);
  FIELD(tj_executable_stats_t, num_lowered_groups);
  FIELD(tj_executable_stats_t, num_copied_groups);
  FIELD(tj_executable_stats_t, num_region_blocks);
  FIELD(tj_executable_stats_t, num_region_blocks_processed);
  FIELD(tj_executable_stats_t, num_host_kernels);
  STRUCT(tj_quant_attrs_t);  // quant2 (issue 17)
  FIELD(tj_quant_attrs_t, dtype);
  FIELD(tj_quant_attrs_t, axis);
  FIELD(tj_quant_attrs_t, block_size);
  FIELD(tj_quant_attrs_t, no_saturate);
  FIELD(tj_quant_attrs_t, int4);
  FIELD(tj_quant_attrs_t, odd);

  STRUCT(tj_profile_entry_t);
  FIELD(tj_profile_entry_t, kind);
  FIELD(tj_profile_entry_t, name);
  FIELD(tj_profile_entry_t, detail);
  FIELD(tj_profile_entry_t, ms);
  FIELD(tj_profile_entry_t, share);
  FIELD(tj_profile_entry_t, launches);
  FIELD(tj_profile_entry_t, bytes);
  FIELD(tj_profile_entry_t, flops);
  FIELD(tj_profile_entry_t, gbytes_per_s);
  FIELD(tj_profile_entry_t, gflops_per_s);

  STRUCT(tj_profile_report_t);
  FIELD(tj_profile_report_t, graph);
  FIELD(tj_profile_report_t, target);
  FIELD(tj_profile_report_t, runs);
  FIELD(tj_profile_report_t, run_ms);
  FIELD(tj_profile_report_t, kernel_ms);
  FIELD(tj_profile_report_t, host_ms);
  FIELD(tj_profile_report_t, copy_ms);
  FIELD(tj_profile_report_t, setup_ms);
  FIELD(tj_profile_report_t, accounted_ms);
  FIELD(tj_profile_report_t, num_kernels);
  FIELD(tj_profile_report_t, cuda_graphs_disabled);
  FIELD(tj_profile_report_t, num_entries);
  FIELD(tj_profile_report_t, entries);
  FIELD(tj_profile_report_t, allocator);
  FIELD(tj_profile_report_t, allocator.fn);
  FIELD(tj_profile_report_t, allocator.user_data);
  FIELD(tj_profile_report_t, bytes);

  STRUCT(tj_verify_options_t);
  FIELD(tj_verify_options_t, struct_size);
  FIELD(tj_verify_options_t, rtol);
  FIELD(tj_verify_options_t, atol);
  FIELD(tj_verify_options_t, drift_factor);
  FIELD(tj_verify_options_t, num_symbols);
  FIELD(tj_verify_options_t, symbol_names);
  FIELD(tj_verify_options_t, symbol_values);
  FIELD(tj_verify_options_t, seed);
  FIELD(tj_verify_options_t, edge_values);
  FIELD(tj_verify_options_t, nonfinite);
  FIELD(tj_verify_options_t, unfused);

  STRUCT(tj_verify_value_t);
  FIELD(tj_verify_value_t, step);
  FIELD(tj_verify_value_t, group);
  FIELD(tj_verify_value_t, group_kind);
  FIELD(tj_verify_value_t, node);
  FIELD(tj_verify_value_t, op);
  FIELD(tj_verify_value_t, type);
  FIELD(tj_verify_value_t, output_name);
  FIELD(tj_verify_value_t, against_caller);
  FIELD(tj_verify_value_t, numel);
  FIELD(tj_verify_value_t, mismatches);
  FIELD(tj_verify_value_t, nan_mismatches);
  FIELD(tj_verify_value_t, max_abs_error);
  FIELD(tj_verify_value_t, max_rel_error);
  FIELD(tj_verify_value_t, first_bad_index);
  FIELD(tj_verify_value_t, first_bad_got);
  FIELD(tj_verify_value_t, first_bad_want);
  FIELD(tj_verify_value_t, rtol);
  FIELD(tj_verify_value_t, atol);
  FIELD(tj_verify_value_t, first_bad_condition);

  STRUCT(tj_verify_report_t);
  FIELD(tj_verify_report_t, verdict);
  FIELD(tj_verify_report_t, target);
  FIELD(tj_verify_report_t, boundaries);
  FIELD(tj_verify_report_t, num_groups);
  FIELD(tj_verify_report_t, num_values);
  FIELD(tj_verify_report_t, values);
  FIELD(tj_verify_report_t, first_bad);
  FIELD(tj_verify_report_t, total_mismatches);
  FIELD(tj_verify_report_t, max_abs_error);
  FIELD(tj_verify_report_t, max_rel_error);
  FIELD(tj_verify_report_t, unfused_ran);
  FIELD(tj_verify_report_t, unfused_within_budget);
  FIELD(tj_verify_report_t, unfused_max_abs_error);
  FIELD(tj_verify_report_t, unfused_max_rel_error);
  FIELD(tj_verify_report_t, unfused_mismatches);
  FIELD(tj_verify_report_t, fused_unfused_mismatches);
  FIELD(tj_verify_report_t, blamed_pass);
  FIELD(tj_verify_report_t, blamed_pass_index);
  FIELD(tj_verify_report_t, text);
  FIELD(tj_verify_report_t, allocator_);
  FIELD(tj_verify_report_t, allocator_.fn);
  FIELD(tj_verify_report_t, allocator_.user_data);
  FIELD(tj_verify_report_t, text_bytes_);

  STRUCT(tj_ladder_rung_t);
  FIELD(tj_ladder_rung_t, level);
  FIELD(tj_ladder_rung_t, ran);
  FIELD(tj_ladder_rung_t, diverges);
  FIELD(tj_ladder_rung_t, mismatches);
  FIELD(tj_ladder_rung_t, max_abs_error);
  FIELD(tj_ladder_rung_t, max_rel_error);
  FIELD(tj_ladder_rung_t, compile_ms);
  FIELD(tj_ladder_rung_t, first_value);
  FIELD(tj_ladder_rung_t, note);

  STRUCT(tj_ladder_report_t);
  FIELD(tj_ladder_report_t, rungs);
  FIELD(tj_ladder_report_t, first_diverging);
  FIELD(tj_ladder_report_t, blame);
  FIELD(tj_ladder_report_t, blamed_pass);
  FIELD(tj_ladder_report_t, blamed_pass_index);
  FIELD(tj_ladder_report_t, pass_rewrites);
  FIELD(tj_ladder_report_t, bad_rewrite);
  FIELD(tj_ladder_report_t, bad_rewrite_node);
  FIELD(tj_ladder_report_t, text);
  FIELD(tj_ladder_report_t, allocator_);
  FIELD(tj_ladder_report_t, allocator_.fn);
  FIELD(tj_ladder_report_t, allocator_.user_data);
  FIELD(tj_ladder_report_t, text_bytes_);

  STRUCT(tj_scoreboard_row_t);
  FIELD(tj_scoreboard_row_t, stage);
  FIELD(tj_scoreboard_row_t, nodes);
  FIELD(tj_scoreboard_row_t, kernels);
  FIELD(tj_scoreboard_row_t, bytes_read);
  FIELD(tj_scoreboard_row_t, bytes_written);
  FIELD(tj_scoreboard_row_t, peak_bytes);
  FIELD(tj_scoreboard_row_t, graph_breaks);
  FIELD(tj_scoreboard_row_t, host_calls);
  FIELD(tj_scoreboard_row_t, percent_compiled);
  FIELD(tj_scoreboard_row_t, weight_bytes_read);

  STRUCT(tj_scoreboard_t);
  FIELD(tj_scoreboard_t, rows);
  FIELD(tj_scoreboard_t, activation_bytes);
  FIELD(tj_scoreboard_t, input_bytes);
  FIELD(tj_scoreboard_t, arena_bytes);
  FIELD(tj_scoreboard_t, live_peak_bytes);

  STRUCT(tj_partition_options_t);
  FIELD(tj_partition_options_t, recompute);
  FIELD(tj_partition_options_t, num_symbols);
  FIELD(tj_partition_options_t, symbol_names);
  FIELD(tj_partition_options_t, symbol_values);
  FIELD(tj_partition_options_t, save_attention_lse);

  STRUCT(tj_quantize_weights_options_t);
  FIELD(tj_quantize_weights_options_t, format);
  FIELD(tj_quantize_weights_options_t, group_size);
  FIELD(tj_quantize_weights_options_t, min_elements);
  FIELD(tj_quantize_weights_options_t, flags);

  STRUCT(tj_calibrate_options_t);
  FIELD(tj_calibrate_options_t, method);
  FIELD(tj_calibrate_options_t, percentile);
  FIELD(tj_calibrate_options_t, dtype);
  FIELD(tj_calibrate_options_t, flags);

  STRUCT(tj_partition_stats_t);
  FIELD(tj_partition_stats_t, saved_bytes);
  FIELD(tj_partition_stats_t, num_saved);
  FIELD(tj_partition_stats_t, saved_output_bytes);
  FIELD(tj_partition_stats_t, saved_input_bytes);
  FIELD(tj_partition_stats_t, num_saved_inputs);
  FIELD(tj_partition_stats_t, num_recomputed);

  // python/tensorjit/custom_op.py (custom2).
  STRUCT(tj_custom_type_t);
  FIELD(tj_custom_type_t, dtype);
  FIELD(tj_custom_type_t, rank);
  FIELD(tj_custom_type_t, dims);
  STRUCT(tj_custom_op_desc_t);
  FIELD(tj_custom_op_desc_t, struct_size);
  FIELD(tj_custom_op_desc_t, name);
  FIELD(tj_custom_op_desc_t, version);
  FIELD(tj_custom_op_desc_t, num_inputs);
  FIELD(tj_custom_op_desc_t, shape);
  FIELD(tj_custom_op_desc_t, function);
  FIELD(tj_custom_op_desc_t, signature);
  FIELD(tj_custom_op_desc_t, host);
  FIELD(tj_custom_op_desc_t, vjp);
  FIELD(tj_custom_op_desc_t, flags);
  FIELD(tj_custom_op_desc_t, user_data);
  FIELD(tj_custom_op_desc_t, cuda_ptx);
  FIELD(tj_custom_op_desc_t, cuda_entry);
  FIELD(tj_custom_op_desc_t, cuda_launch);
  FIELD(tj_custom_op_desc_t, cuda_llvm_ir);
  STRUCT(tj_custom_launch_t);
  FIELD(tj_custom_launch_t, grid);
  FIELD(tj_custom_launch_t, block);
  FIELD(tj_custom_launch_t, shared_bytes);
  return 0;
}
