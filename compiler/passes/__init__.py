"""Model -> model passes over the op graph: sharding policies, placement over tp/ep/pp/dp with the collectives it implies, engine profiles (fusion, kernels), expert offload."""
