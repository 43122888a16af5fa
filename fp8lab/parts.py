"""Parts descriptions: a JSON-able assignment of storage formats to parts of a model, turned into a Recipe.

    build_recipe({"weights": [[r"\\.layers\\.3\\.", "nvfp4"]], "lm_head": "fp8_tensor", "kv": "fp8"})
    -> Recipe(weight_map=((r"^lm_head$", E4M3 per tensor), (r"\\.layers\\.3\\.", NVFP4)), include_lm_head=True,
              key=value=E4M3 per tensor)

The sensitivity map (one part at a time), the frontier (mixed assignments) and the distributed cells (which
carry the description to the workers as plain JSON) all build their recipes here.
"""
from __future__ import annotations

from fp8lab.scaling import QuantSpec

__all__ = ["WEIGHT_SPECS", "KV_SPECS", "build_recipe"]

# Storage names are fp8lab.bandwidth's (so bytes and quality talk about the same thing); each maps to the
# fp8lab.scaling spec the fake quantization uses. "bf16" = left as loaded (its bytes are counted at 16 bits).
WEIGHT_SPECS = {
    "bf16": None,
    "fp8_tensor": QuantSpec("e4m3", "tensor"),
    "fp8_block128": QuantSpec("e4m3", "block", block=(128, 128)),
    "int8_channel": QuantSpec("int8", "channel", axis=0),
    "mxfp8": QuantSpec("e4m3", "mx"),
    "nvfp4": QuantSpec("e2m1", "nvfp4"),
    "mxfp4": QuantSpec("e2m1", "mx", scale_rule="floor"),
}
KV_SPECS = {"bf16": None, "fp8": QuantSpec("e4m3", "tensor"), "nvfp4": QuantSpec("e2m1", "nvfp4")}


def build_recipe(desc: dict):
    """A fp8lab.recipes.Recipe from a parts description:

        {"weights": [[regex, weight storage], ...],   # first match wins; "bf16" = leave alone
         "lm_head": weight storage,                    # optional
         "kv": "fp8" | "nvfp4" | "bf16", "kv_layers": [0, 3]}   # optional
    """
    from fp8lab.recipes import Recipe, RecipeError
    bad = set(desc) - {"weights", "lm_head", "kv", "kv_layers"}
    if bad:
        raise RecipeError(f"unknown keys {sorted(bad)} in a parts description")
    wmap = []
    head = desc.get("lm_head", "bf16")
    for name in [head] + [f for _, f in desc.get("weights", [])]:
        if name not in WEIGHT_SPECS:
            raise RecipeError(f"unknown weight storage {name!r}; valid: {', '.join(WEIGHT_SPECS)}")
    if head != "bf16":
        wmap.append((r"^lm_head$", WEIGHT_SPECS[head]))
    wmap += [(rx, WEIGHT_SPECS[f]) for rx, f in desc.get("weights", [])]
    kv = desc.get("kv", "bf16")
    if kv not in KV_SPECS:
        raise RecipeError(f"unknown KV storage {kv!r}; valid: {', '.join(KV_SPECS)}")
    kvl = desc.get("kv_layers")
    return Recipe("parts", _describe(desc), weight_map=tuple(wmap), include_lm_head=head != "bf16",
                  key=KV_SPECS[kv], value=KV_SPECS[kv], kv_layers=tuple(kvl) if kvl is not None else None)


def _describe(desc: dict) -> str:
    bits = [f"{rx} -> {f}" for rx, f in desc.get("weights", []) if f != "bf16"]
    if desc.get("lm_head", "bf16") != "bf16":
        bits.append(f"lm_head -> {desc['lm_head']}")
    if desc.get("kv", "bf16") != "bf16":
        bits.append(f"KV -> {desc['kv']}" + (f" (layers {desc['kv_layers']})" if desc.get("kv_layers") else ""))
    return "; ".join(bits) or "nothing quantized"
