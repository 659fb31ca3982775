"""DeepSpeed backend: ZeRO stages 1-3 around tprimat's decoder, configured by a JSON built from the spec."""
