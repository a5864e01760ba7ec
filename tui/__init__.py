"""The Olifant terminal UI (Textual), installed as `olifant_mlx.tui`: one module per tab
(`generate_tab`, `compare_tab`, `calculator_tab`, `models_tab`), the App in `app`."""
