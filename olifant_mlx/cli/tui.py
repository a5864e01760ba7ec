"""`tui`: the terminal UI, with generate's flags (every one is checked before the UI starts)."""
from __future__ import annotations

from olifant_mlx.cli.common import add_generation_args, prepare, template_kwargs


def cmd_tui(args) -> int:
    from olifant_mlx.tui import store
    from olifant_mlx.tui.app import OlifantApp

    options, spec, meter = prepare(args)                 # bad input fails before the UI starts
    kwargs = template_kwargs(args)
    if args.conversations:
        store.check_path(args.conversations)
    app = OlifantApp(model=args.model, draft=spec.text, options=options, prompt=args.prompt,
                     system_prompt=args.system_prompt, template_kwargs=kwargs,
                     mode="document" if args.document or args.ignore_chat_template else "chat",
                     conversations=args.conversations, meter=meter)
    if args.theme:
        if args.theme not in app.available_themes:
            raise ValueError(f"--theme {args.theme}: not a Textual theme; one of "
                             f"{', '.join(sorted(app.available_themes))}")
        app.initial_theme = args.theme
    app.run()
    return 0


def add_tui(t):
    add_generation_args(t, prompt=False)
    t.add_argument("-p", "--prompt", help="text to start with: your first message, or with --document "
                                          "the beginning of the document")
    t.add_argument("--document", action="store_true",
                   help="start in the Document tab (the text continued as it is; implied by "
                        "--ignore-chat-template)")
    t.add_argument("--conversations", metavar="FILE",
                   help="opt-in: keep your conversations and documents in FILE (local JSON, mode "
                        "0600) and list them again next time")
    t.add_argument("--theme", help="a Textual theme (ctrl+p, 'Change theme', lists them)")
    t.set_defaults(func=cmd_tui)
