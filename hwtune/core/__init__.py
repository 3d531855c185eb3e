"""Core vocabulary shared by every package: types, records, errors, device profiles, environment,
packages, model configs, the backend catalogue and validation. Imports nothing else of hwtune and never
torch, flashinfer or triton."""
