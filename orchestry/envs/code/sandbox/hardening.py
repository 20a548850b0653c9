"""Rewrite trusted test and setup code so that untrusted objects cannot fake a comparison.

Runs in the parent, on trusted text, before the job is sent to the sandbox. Every comparison, truth
test and arithmetic operator of a snippet becomes a call to one of the strict operators the child
binds into each test's namespace (`strict_operators.make_strict_helpers`), which refuse any value
whose exact type is not a builtin value type. The names called here (``__sandbox_<name>__``) are
`strict_operators.HELPER_NAMES`; keep both sides in step.
"""

from __future__ import annotations

import ast
import functools

_CMP_SYMBOLS = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_BINOP_SYMBOLS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
_UNARY_SYMBOLS = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}


def _helper_call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(
        func=ast.Name(id=f"__sandbox_{name}__", ctx=ast.Load()), args=list(args), keywords=[]
    )


def _truth(node: ast.expr) -> ast.Call:
    return _helper_call("truth", node)


class _Hardener(ast.NodeTransformer):
    """Route comparisons, truth tests and arithmetic through the harness's strict helpers."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if len(node.ops) == 1:
            op = ast.Constant(_CMP_SYMBOLS[type(node.ops[0])])
            return _helper_call("cmp", op, node.left, node.comparators[0])
        no_args = ast.arguments(
            posonlyargs=[],
            args=[],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        )
        parts: list[ast.expr] = []
        for op, right in zip(node.ops, node.comparators, strict=True):
            parts += [ast.Constant(_CMP_SYMBOLS[type(op)]), ast.Lambda(args=no_args, body=right)]
        return _helper_call("chain", node.left, ast.Tuple(elts=parts, ctx=ast.Load()))

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        op = ast.Constant(_BINOP_SYMBOLS[type(node.op)])
        return _helper_call("binop", op, node.left, node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            node.operand = _truth(node.operand)
            return node
        if isinstance(node.operand, ast.Constant):
            return node  # a literal such as -1
        return _helper_call("unary", ast.Constant(_UNARY_SYMBOLS[type(node.op)]), node.operand)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        # `a and b` truth-tests every operand but the last, which it returns unchanged.
        self.generic_visit(node)
        node.values = [_truth(v) for v in node.values[:-1]] + node.values[-1:]
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        self.generic_visit(node)
        op = ast.Constant(_BINOP_SYMBOLS[type(node.op)])
        if isinstance(node.target, ast.Name):
            current = ast.Name(id=node.target.id, ctx=ast.Load())
            return ast.Assign(
                targets=[node.target], value=_helper_call("inplace", op, current, node.value)
            )
        node.value = _truth(node.value)
        return node

    def _guard_test(self, node: ast.If | ast.While | ast.IfExp | ast.Assert) -> ast.AST:
        self.generic_visit(node)
        node.test = _truth(node.test)
        return node

    visit_If = visit_While = visit_IfExp = visit_Assert = _guard_test

    def visit_comprehension(self, node: ast.comprehension) -> ast.comprehension:
        self.generic_visit(node)
        node.ifs = [_truth(c) for c in node.ifs]
        return node


@functools.lru_cache(maxsize=4096)
def harden_snippet(source: str) -> str:
    """Rewrite trusted test or setup code so untrusted objects cannot fake a comparison.

    Raises SyntaxError when `source` is not valid Python.
    """
    tree = _Hardener().visit(ast.parse(source))
    hardened = ast.unparse(ast.fix_missing_locations(tree))
    compile(hardened, "<hardened>", "exec", dont_inherit=True)
    return hardened
