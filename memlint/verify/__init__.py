"""`memlint verify`: run a flagged program on a GPU and measure each finding.

Imports torch only in the child process and in the runner's CUDA check, never
on `memlint check`'s path.
"""
