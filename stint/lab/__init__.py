"""The load test's library: throwaway backends, cgroups, the case runner,
sampling, checks and reports. ``pytest loadtest --run-load`` drives it."""
