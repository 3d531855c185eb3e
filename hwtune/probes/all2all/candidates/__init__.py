"""One module per all2all backend hwtune can run; each backend's catalogue record names its class
(``Backend.probe``) and ``hwtune.probes.registry`` loads it inside a spawned rank."""
