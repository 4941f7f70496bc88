"""Release jobs: submission, execution state, cancellation, outputs."""
