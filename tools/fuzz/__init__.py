"""coil's differential fuzzer: random valid PyTorch programs, compiled with coil and compared
with eager under the accuracy rule of bench/accuracy.py (docs/fuzzing.md).

  program.py   a program: input specs, one Python statement per op, outputs; source text,
               eager execution (with the validity checks), reproducer text
  inputs.py    make_input: one input tensor from its spec (shape, dtype, values, layout, seed)
  checks.py    validity checks that keep programs well conditioned (margins, magnitudes)
  generator.py the seeded generator (op families and their weights)
  runner.py    one program through torch.compile(backend="coil"): classify and compare
  minimize.py  shrink a failing program while it still fails
"""
