"""The tests that carry the marker `slow`: the one table of them, which tests/conftest.py applies.

`pytest` (the README's test command) leaves them out so that it passes in under ten minutes on 2 cores and keeps
what a change most often breaks: every script end to end on a real environment, the math, the bad input, and the
checks the scripts share, the longest of them on the two quickest scripts only. `pytest -m slow` runs the rest, and
CI (.ci/run) runs both commands, so none of these goes untested: those on the other four scripts, the device tests' long
end-to-end runs on the CPU, bfloat16 and torch.compile at tiny sizes (slower than float32 on a CPU), the benchmark
and train-alike tools' real runs, the published results made again, and the rarer hardware faults.
tests/test_slow_table.py checks that `pytest -m slow` selects every name here."""

# A check parametrised over tests/scripts.py's SCRIPTS runs by default on these scripts and under `slow` on the rest.
QUICK_SCRIPTS = ("abs_pqn_minatar.py", "abs_ppo_mujoco.py")
EVERY_SCRIPT = {
    "test_stop_at_step.py": ("test_stopped_and_resumed_run_follows_the_schedules_of_an_unstopped_one",),
    "test_hardening_runs.py": (
        "test_a_signal_during_the_evaluation_then_resume_evaluates_again_and_a_finished_run_is_kept",),
    "test_runs_all_scripts.py": ("test_sigterm_then_resume_with_only_resume_finishes_the_run",),
    "test_play.py": ("test_a_saved_model_and_checkpoint_play_back_the_runs_own_evaluation",),
}

# Whole tests (every parameter), by file; "name[param]" names one parameter.
SLOW = {
    # the device checks' end-to-end runs (their update-against-CPU cases stay in `pytest`; each script's own
    # end-to-end tests run it on the CPU there)
    "test_cuda.py": ("test_pqn_bf16_compile_end_to_end_on_device", "test_pqn_abs_end_to_end_on_device",
                     "test_btr_abs_end_to_end_on_device", "test_gns_end_to_end_on_device",
                     "test_ppo_atari_abs_end_to_end_on_device"),
    # bfloat16 and torch.compile end to end: on a CPU at tiny shapes bfloat16 is slower than float32; and PQN's large
    # network (pqn-l) end to end (its other end-to-end runs, on the default network, stay in `pytest`)
    "test_abs_pqn_atari.py": ("test_end_to_end_bf16_compile", "test_end_to_end_fixed_baseline_and_pqn_l",
                              "test_one_event_per_finished_game_at_its_step",
                              "test_evaluation_of_a_game_without_fire_is_the_same_with_and_without_the_flag",
                              "test_compile_without_a_compiler_is_a_one_line_error",
                              "test_compiled_q_network_gives_the_eager_update",
                              "test_resume_continues_step_count_and_run_dir"),
    "test_gns_pqn_atari.py": ("test_end_to_end_bf16_compile", "test_end_to_end_authors_protocol"),
    "test_abs_btr.py": ("test_bf16_run", "test_no_adapt_impala_run_then_resume_without_buffer_refills",
                        "test_abs_run_then_resume_with_buffer"),
    # the tools' real runs (their bad-input checks stay in `pytest`)
    "test_bench.py": ("test_quick_benchmark_pqn_group", "test_a_failed_run_prints_its_command_and_its_last_output",
                      "test_the_divergence_phase_is_timed_where_abs_measures",
                      "test_time_limit_stops_a_run_that_still_counts",
                      "test_gns_vs_abs_cost_reports_per_call_and_per_run_shares"),
    "test_train_alike.py": ("test_a_comment_trains_alike_and_a_commit_trains_as_itself",
                            "test_sigterm_stops_the_run_in_progress_and_removes_the_temporary_copies"),
    "test_sweep.py": ("test_real_tiny_sweep_abs_pqn_atari", "test_report_calls_report_tool_with_labels",
                      "test_every_builtin_label_is_accepted_by_its_script",
                      "test_report_keeps_the_experiments_length_and_leaves_other_lengths_out"),
    "test_anchor.py": ("test_input_the_comparison_cannot_use_is_one_line_and_exit_2",),
    "test_install.py": ("test_pip_on_an_older_python_stops_with_one_line_naming_it",),
    "test_play.py": ("test_a_file_of_another_game_script_or_network_is_one_line",),
    "test_video.py": ("test_capture_video_films_the_first_games_and_changes_no_number[abs_pqn_atari.py]",
                      "test_mujoco_capture_video_with_egl",
                      "test_mujoco_without_a_rendering_backend_is_one_line_before_the_run"),
    # the published results made again from the committed runs, and the pages' numbers checked against them
    # (mujoco-1m's stay in `pytest`: its report is the quickest to make, 7 s against mujoco-5m's 30 s)
    "test_results.py": tuple(f"{test}[{grid}]" for grid in ("mujoco-5m", "atari10-early", "ppo-atari-check")
                             for test in ("test_report_data_is_regenerated_from_the_committed_runs",
                                          "test_report_is_regenerated_from_the_committed_runs",
                                          "test_figure_data_is_regenerated_from_the_committed_runs")) + (
        "test_mujoco_reports_say_what_smallest_p_their_seeds_allow[mujoco-5m]",
        "test_mujoco_pages_machine_time_is_the_reports[mujoco-5m]",
        "test_mujoco_5m_page_states_both_reports_divergence_trends",
        "test_mujoco_5m_page_states_the_preregistered_numbers_of_each_complete_task",
        "test_mujoco_5m_page_says_every_number_mujoco_page_lists",
        "test_mujoco_5m_evaluation_table_matches_an_independent_computation",
        "test_ppo_atari_check_page_states_the_reports_numbers", "test_atari10_early_page_states_the_reports_numbers",
        "test_ess_study_is_regenerated_from_the_committed_runs",
        "test_ess_study_figure_data_is_regenerated_from_the_committed_runs"),
    "test_results_minatar.py": ("test_the_report_is_made_again_from_the_published_runs",
                                "test_the_side_by_side_with_purejaxql_is_made_again_from_the_published_files"),
    "test_early_page.py": ("test_check_fill_and_markers",),
    # the rarer faults: a full or read-only disk, a corrupted checkpoint or one written before checkpoints carried a
    # digest, two resumes at once, a clock going back, a prefix run stopped in its evaluation, the --stop-at-step
    # checks, a run extended past its total
    "test_full_disk.py": ("test_a_full_filesystem_mid_run_keeps_the_checkpoint_and_the_same_resume_finishes",
                          "test_a_run_directory_made_read_only_mid_run_is_one_line_and_the_same_resume_finishes"),
    "test_checkpoint_digest.py": (
        "test_a_flipped_bit_or_overwritten_bytes_are_refused_and_an_intact_checkpoint_resumes",
        "test_a_checkpoint_written_before_digests_still_resumes"),
    "test_two_resumes.py": ("test_a_resume_delayed_before_the_lock_refuses_a_checkpoint_another_resume_replaced",),
    "test_clock.py": ("test_a_clock_running_backwards_keeps_durations_positive_and_the_run_resumable",),
    "test_hardening_runs.py": ("test_a_prefix_run_stopped_during_its_evaluation_is_evaluated_again_at_its_stop",),
    "test_stop_at_step.py": ("test_stop_at_step_checks",),
    "test_extend_run.py": ("test_ppo_s_learning_rate_goes_on_over_the_new_total_only_when_asked",),
}


def is_slow(file: str, name: str) -> bool:
    """Whether the test `name` ("function" or "function[param]") of tests/`file` carries the marker `slow`."""
    function, _, param = name.partition("[")
    if function in EVERY_SCRIPT.get(file, ()):
        return param.split("-")[0].rstrip("]") not in QUICK_SCRIPTS
    return function in SLOW.get(file, ()) or name in SLOW.get(file, ())
