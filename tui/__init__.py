"""The Olifant terminal UI (Textual), installed as `olifant_mlx.tui`: one module per pane
(`chat_tab`, `document_tab`, `compare_tab`, `calculator_tab`, `models_tab`, `settings_tab`,
`live_panel`, `conversations_panel`), the App in `app`."""
