"""`mlgo export`: a policy as the model files LLVM's own advisors load."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a policy as a TensorFlow SavedModel or TFLite model for LLVM",
        description=(
            "Write POLICY in the format LLVM binds to. savedmodel: a SavedModel (tag serve, "
            "signature 'action': one int64 [1] input per feature plus step_type, reward and "
            "discount; output inlining_decision int64 [1]) for release mode "
            "(-DLLVM_INLINER_MODEL_PATH=DIR, AOT-compiled into clang). tflite: model.tflite "
            "and output_spec.json for development mode "
            "(-mllvm -enable-ml-inliner=development -mllvm "
            "-ml-inliner-model-under-training=DIR). The model computes the same decisions "
            "as the policy in pymlgo. OUTPUT_DIR appears only once complete. "
            "Needs TensorFlow: pip install 'pymlgo[export]'."
        ),
    )
    p.add_argument("--policy", required=True,
                   help="a saved policy directory or pretrained:NAME (e.g. "
                   "pretrained:inlining-oz)")
    p.add_argument("--format", required=True, choices=("savedmodel", "tflite"),
                   help="savedmodel (release mode, AOT) or tflite (development mode)")
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", type=Path, required=True,
                   metavar="DIR", help="directory to create")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT_DIR if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pymlgo.policy.export import ExportError, export_policy
    from pymlgo.policy.store import PolicyLoadError, load_policy

    try:
        policy = load_policy(args.policy)
        result = export_policy(policy, args.format, args.output_dir, overwrite=args.overwrite)
    except (ExportError, PolicyLoadError, OSError) as exc:
        print(f"mlgo export: {exc}", file=sys.stderr)
        return 2
    print(f"{args.policy} -> {result.directory} ({result.format}: {', '.join(result.files)})")
    return 0
