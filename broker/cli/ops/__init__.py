"""``broker init | doctor | serve``: the operator's set-up, health-check and daemon commands, one module each."""
