"""The scenario: the frozen, validated configuration, its text forms, model presets and hardware profiles."""
