"""A small in-memory model of the DynamoDB calls the two ledgers make
(``common/action_ledger.py`` through a boto3 ``Table``, ``capacity/ledger.py`` through a client):
``GetItem``, ``PutItem``, ``UpdateItem``, ``Scan`` and ``TransactWriteItems`` on tables with a
partition key only, with the expressions they use. moto's DynamoDB takes ~70 ms a call, which
makes a simulated month take hours; this takes microseconds.

It sits behind a real botocore client (:meth:`FakeDynamoDB.client`, :meth:`FakeDynamoDB.table`):
botocore validates and serialises the request, the model answers in place of the HTTP round trip
(:mod:`tests.aws_model.sdk`), botocore raises the modelled error classes
(``ConditionalCheckFailedException``, ``TransactionCanceledException`` with its
``CancellationReasons``) exactly as for a real answer, and the client's retry configuration
decides whether a throttled request or one whose answer was lost is sent again (a client built
without one sends each request once). What the model does not implement
raises ``NotImplementedError`` naming it: it never answers a request it does not understand.
tests/aws_model/test_dynamodb.py runs the same call sequences on moto and on the model.

Reads are always strongly consistent (the ledgers ask for ``ConsistentRead``). Reserved words
are not checked (the ledgers' unit tests on moto and the differential test catch one). Faults
(:class:`tests.aws_model.batch.Faults`) apply per call: a throttle before the call, a lost
answer or a crash after DynamoDB wrote.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any

from botocore.exceptions import ClientError

from . import sdk
from .batch import Clock, Faults

Item = dict[str, dict[str, Any]]  # attribute name -> typed value ({"S": "x"}, {"N": "1"}, {"SS": [...]}, ...)

# Up to 100 actions [aws: ddb.transact-write-items].
TRANSACTION_LIMIT = 100
_ALLOWED = {  # the request parameters the model implements, per operation
    "GetItem": {"TableName", "Key", "ConsistentRead"},
    "PutItem": {"TableName", "Item", "ConditionExpression", "ExpressionAttributeNames", "ExpressionAttributeValues"},
    "UpdateItem": {
        "TableName",
        "Key",
        "ReturnValues",
        "UpdateExpression",
        "ConditionExpression",
        "ExpressionAttributeNames",
        "ExpressionAttributeValues",
    },
    "Scan": {
        "TableName",
        "FilterExpression",
        "ExpressionAttributeNames",
        "ExpressionAttributeValues",
        "ConsistentRead",
        "ExclusiveStartKey",
        "Limit",
    },
    "TransactWriteItems": {"TransactItems", "ClientRequestToken"},
}


class DynamoDBError(Exception):
    """An error answer: its code, message and any modelled fields (``CancellationReasons``)."""

    def __init__(self, code: str, message: str, **fields: Any):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.fields = code, message, fields


def _validation(message: str) -> DynamoDBError:
    return DynamoDBError("ValidationException", message)


def _conditional_check_failed() -> DynamoDBError:
    return DynamoDBError("ConditionalCheckFailedException", "The conditional request failed")


class FakeDynamoDB:
    """One account's tables. ``max_page_items``: a Scan page ends after this many items, standing
    in for DynamoDB's 1 MB page [aws: ddb.scan-pages],
    so callers' paging is exercised."""

    def __init__(self, *, faults: Faults | None = None, max_page_items: int | None = None, clock: Clock | None = None):
        """``clock``: the time the requests are logged at (``sdk.Calls``)."""
        self.faults, self.clock = faults or Faults(), clock or Clock()
        self.max_page_items = max_page_items
        self.tables: dict[str, tuple[str, dict[str, Item]]] = {}  # name -> (partition key attribute, key value -> item)
        self.calls = 0
        self.current: tuple[str, dict[str, Any]] = ("", {})  # the request being answered (a fault plan may look at it)
        self.transactions: dict[str, str] = {}  # ClientRequestToken -> the request it carried out

    def create_table(self, name: str, *, key: str) -> None:
        """A table keyed by the string attribute ``key`` (both ledgers' tables are)."""
        self.tables[name] = (key, {})

    def client(self, *, config: Any = None, by: str = "", calls: sdk.Calls | None = None) -> Any:
        """A real boto3 DynamoDB client with ``config`` (one request a call when None) whose requests
        this model answers, logged in ``calls`` as sent ``by`` that sender."""
        return sdk.client("dynamodb", self._answer, now=lambda: self.clock.now, config=config, by=by, calls=calls)

    def table(self, name: str, *, config: Any = None, by: str = "", calls: sdk.Calls | None = None) -> Any:
        """A boto3 resource ``Table`` (what the reclaim ledger is given) answered by this model, as :meth:`client`."""
        resource = sdk.session().resource("dynamodb", config=sdk.unsigned(config))
        sdk.serve(resource.meta.client, self._answer, now=lambda: self.clock.now, by=by, calls=calls)
        return resource.Table(name)

    # --- the API ----------------------------------------------------------------------------

    def call(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        """Carry out one request (typed attribute values, as on the wire)."""
        if operation not in _ALLOWED:
            raise NotImplementedError(f"the DynamoDB model does not implement {operation}")
        unknown = set(request) - _ALLOWED[operation]
        if unknown:
            raise NotImplementedError(f"the DynamoDB model does not implement {operation} parameters {sorted(unknown)}")
        self.calls += 1
        return getattr(self, f"_{_snake(operation)}")(request)

    def _get_item(self, request: dict[str, Any]) -> dict[str, Any]:
        # strongly consistent: the ledgers read with ConsistentRead [aws: ddb.put-item-replaces]
        key_name, items = self._table(request["TableName"])
        item = items.get(_key_value(key_name, request["Key"]))
        return {"Item": _copy(item)} if item is not None else {}

    def _put_item(self, request: dict[str, Any]) -> dict[str, Any]:
        _, items, key, new = self._prepare_put(request)
        # Replaces the whole item, only if the condition holds on the item as it was [aws: ddb.put-item-replaces].
        if not _condition_holds(request, items.get(key)):
            raise _conditional_check_failed()
        items[key] = new
        return {}

    def _update_item(self, request: dict[str, Any]) -> dict[str, Any]:
        # created when missing, changed only if the condition holds [aws: ddb.update-item-creates]
        _, items, key, updated = self._prepare_update(request)
        if not _condition_holds(request, items.get(key)):
            raise _conditional_check_failed()
        items[key] = updated
        # ALL_NEW: the item as it is after the update [aws: ddb.update-item-creates]; the ledgers ask for no other
        returns = request.get("ReturnValues", "NONE")
        if returns not in ("NONE", "ALL_NEW"):
            raise NotImplementedError(f"the DynamoDB model does not implement ReturnValues {returns}")
        return {"Attributes": _copy(updated)} if returns == "ALL_NEW" else {}

    def _scan(self, request: dict[str, Any]) -> dict[str, Any]:
        key_name, items = self._table(request["TableName"])
        _check_placeholders(request, [request.get("FilterExpression")])
        limit = min(x for x in (request.get("Limit"), self.max_page_items, len(items) + 1) if x is not None)
        start = _key_value(key_name, request["ExclusiveStartKey"]) if "ExclusiveStartKey" in request else None
        # The order is DynamoDB's own (by hash); the model's is by key, so a page can resume after any key.
        keys = [k for k in sorted(items) if start is None or k > start]
        page, found = keys[:limit], []
        for key in page:
            item = items[key]
            if "FilterExpression" not in request or _evaluate(request["FilterExpression"], item, request):
                found.append(_copy(item))
        answer: dict[str, Any] = {"Items": found, "Count": len(found), "ScannedCount": len(page)}
        # The page stops at Limit items evaluated (before the filter); LastEvaluatedKey says where the next one
        # starts [aws: ddb.scan-pages].
        if len(page) == limit and len(keys) > 0:
            answer["LastEvaluatedKey"] = {key_name: {"S": page[-1]}}
        return answer

    def _transact_write_items(self, request: dict[str, Any]) -> dict[str, Any]:
        # All or nothing; a failed condition cancels the whole transaction, with one reason per action ("None" where
        # it held) [aws: ddb.transact-write-items].
        # ... and idempotent: a token already carried out returns success without changing anything again
        # (botocore fills ClientRequestToken in; its retries resend the same token).
        token, body = request.get("ClientRequestToken"), json.dumps(request["TransactItems"], sort_keys=True)
        if token in self.transactions:
            if self.transactions[token] != body:
                raise DynamoDBError(
                    "IdempotentParameterMismatchException",
                    "The request uses the same client token as a previous, but non-identical request",
                )
            return {}
        actions = request["TransactItems"]
        if not 1 <= len(actions) <= TRANSACTION_LIMIT:
            raise _validation(f"Member must have length less than or equal to {TRANSACTION_LIMIT}")
        writes, reasons, seen = [], [], set()
        for action in actions:
            ((kind, body),) = action.items()
            if kind == "Put":
                _, items, key, new = self._prepare_put(body)
            elif kind == "Update":
                _, items, key, new = self._prepare_update(body)
            else:
                raise NotImplementedError(f"the DynamoDB model does not implement transaction action {kind}")
            if (body["TableName"], key) in seen:
                raise _validation("Transaction request cannot include multiple operations on one item")
            seen.add((body["TableName"], key))
            writes.append((items, key, new))
            holds = _condition_holds(body, items.get(key))
            reasons.append(
                {"Code": "None"}
                if holds
                else {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"}
            )
        if any(r["Code"] != "None" for r in reasons):
            codes = ", ".join(r["Code"] for r in reasons)
            raise DynamoDBError(
                "TransactionCanceledException",
                f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
                CancellationReasons=reasons,
            )
        for items, key, new in writes:
            items[key] = new
        if token is not None:
            self.transactions[token] = body
        return {}

    # --- internals --------------------------------------------------------------------------

    def _table(self, name: str) -> tuple[str, dict[str, Item]]:
        if name not in self.tables:
            raise DynamoDBError("ResourceNotFoundException", "Requested resource not found")
        return self.tables[name]

    def _prepare_put(self, request: dict[str, Any]) -> tuple[str, dict[str, Item], str, Item]:
        key_name, items = self._table(request["TableName"])
        _check_placeholders(request, [request.get("ConditionExpression")])
        item = request["Item"]
        if key_name not in item:
            raise _validation(f"One or more parameter values were invalid: Missing the key {key_name} in the item")
        for value in item.values():
            _check_value(value)
        return key_name, items, _key_value(key_name, {key_name: item[key_name]}), _copy(item)

    def _prepare_update(self, request: dict[str, Any]) -> tuple[str, dict[str, Item], str, Item]:
        key_name, items = self._table(request["TableName"])
        _check_placeholders(request, [request.get("ConditionExpression"), request["UpdateExpression"]])
        key = _key_value(key_name, request["Key"])
        # Creates the item when it does not exist [aws: ddb.update-item-creates].
        updated = _copy(items.get(key)) or {key_name: {"S": key}}
        _apply_update(request["UpdateExpression"], updated, request, key_name)
        return key_name, items, key, updated

    def _answer(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        """A request as sent (typed attribute values), answered as DynamoDB would, faults included."""
        self.current = (operation, request)
        self.faults.check(operation, "before", throttle_code="ThrottlingException", service="dynamodb")
        try:
            answer = self.call(operation, request)
        except DynamoDBError as error:
            raise ClientError(
                {"Error": {"Code": error.code, "Message": error.message}, **error.fields}, operation
            ) from None
        self.faults.check(operation, "after", throttle_code="ThrottlingException", service="dynamodb")  # it wrote
        return answer


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", operation).lower()


def _copy(item: Item | None) -> Item | None:
    return None if item is None else json.loads(json.dumps(item))


def _key_value(key_name: str, key: Item) -> str:
    if set(key) != {key_name} or set(key[key_name]) != {"S"}:
        raise _validation("The provided key element does not match the schema")
    return key[key_name]["S"]


def _check_value(value: dict[str, Any]) -> None:
    ((kind, content),) = value.items()
    if kind in ("SS", "NS", "BS") and not content:  # [aws: ddb.empty-sets]
        raise _validation("One or more parameter values were invalid: An set may not be empty")
    if kind in ("B", "BS"):
        raise NotImplementedError("the DynamoDB model does not implement binary values")


# --- expressions ---------------------------------------------------------------------------------
# [aws: ddb.expressions]

_TOKEN = re.compile(r"\s*(<>|<=|>=|[=<>(),+\-]|[#:]?[A-Za-z_][A-Za-z0-9_]*|\S)")
_COMPARATORS = ("=", "<>", "<", "<=", ">", ">=")


@lru_cache(maxsize=512)
def _tokens(expression: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(expression.strip()))


def _placeholders(expression: str) -> set[str]:
    return {t for t in _tokens(expression) if t[0] in "#:"}


def _check_placeholders(request: dict[str, Any], expressions: list[str | None]) -> None:
    """Every placeholder used must be defined, and every one defined used [aws: ddb.expressions]."""
    used = set().union(*(_placeholders(e) for e in expressions if e))
    for prefix, parameter, word in (
        ("#", "ExpressionAttributeNames", "name"),
        (":", "ExpressionAttributeValues", "value"),
    ):
        defined = set(request.get(parameter, {}))
        missing = sorted(p for p in used if p[0] == prefix and p not in defined)
        if missing:
            raise _validation(
                f"Invalid expression: An expression attribute {word} used in expression is not defined; attribute {word}: {missing[0]}"
            )
        unused = sorted(defined - used)
        if unused:
            raise _validation(f"Value provided in {parameter} unused in expressions: keys: {{{', '.join(unused)}}}")
    for value in request.get("ExpressionAttributeValues", {}).values():
        _check_value(value)


class _Parser:
    """Recursive descent over a condition expression; the precedence, highest first, is
    comparators, IN, functions, parentheses, NOT, AND, OR (the operators page above)."""

    def __init__(self, expression: str):
        self.tokens, self.at = _tokens(expression), 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise _validation(f"Invalid expression: expected {expected or 'a token'}, found {token}")
        self.at += 1
        return token

    def parse(self) -> tuple:
        tree = self.or_()
        if self.peek() is not None:
            raise _validation(f"Invalid expression: unexpected {self.peek()}")
        return tree

    def or_(self) -> tuple:
        tree = self.and_()
        while (self.peek() or "").upper() == "OR":
            self.take()
            tree = ("or", tree, self.and_())
        return tree

    def and_(self) -> tuple:
        tree = self.not_()
        while (self.peek() or "").upper() == "AND":
            self.take()
            tree = ("and", tree, self.not_())
        return tree

    def not_(self) -> tuple:
        if (self.peek() or "").upper() == "NOT":
            self.take()
            return ("not", self.not_())
        return self.primary()

    def primary(self) -> tuple:
        if self.peek() == "(":
            self.take()
            tree = self.or_()
            self.take(")")
            return tree
        if (self.peek() or "").lower() in ("attribute_exists", "attribute_not_exists", "begins_with", "contains"):
            function = self.take().lower()
            self.take("(")
            arguments = [self.operand()]
            while self.peek() == ",":
                self.take()
                arguments.append(self.operand())
            self.take(")")
            return ("call", function, *arguments)
        left = self.operand()
        token = self.take()
        if token in _COMPARATORS:
            return ("compare", token, left, self.operand())
        if token.upper() == "IN":
            self.take("(")
            choices = [self.operand()]
            while self.peek() == ",":
                self.take()
                choices.append(self.operand())
            self.take(")")
            return ("in", left, choices)
        if token.upper() == "BETWEEN":
            low = self.operand()
            self.take("AND")
            return ("and", ("compare", ">=", left, low), ("compare", "<=", left, self.operand()))
        raise _validation(f"Invalid expression: unexpected {token}")

    def operand(self) -> tuple:
        token = self.take()
        if token.startswith(":"):
            return ("value", token)
        if token.startswith("#") or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            return ("path", token)
        raise NotImplementedError(f"the DynamoDB model does not implement the operand {token!r}")


@lru_cache(maxsize=512)
def _condition(expression: str) -> tuple:
    return _Parser(expression).parse()


def _condition_holds(request: dict[str, Any], item: Item | None) -> bool:
    expression = request.get("ConditionExpression")
    return expression is None or _evaluate(expression, item or {}, request)


def _evaluate(expression: str, item: Item, request: dict[str, Any]) -> bool:
    return _truth(_condition(expression), item, request)


def _resolve(operand: tuple, item: Item, request: dict[str, Any]) -> dict[str, Any] | None:
    kind, token = operand
    if kind == "value":
        return request["ExpressionAttributeValues"][token]
    return item.get(_name(token, request))


def _name(token: str, request: dict[str, Any]) -> str:
    return request["ExpressionAttributeNames"][token] if token.startswith("#") else token


def _truth(tree: tuple, item: Item, request: dict[str, Any]) -> bool:
    operator = tree[0]
    if operator == "or":
        return _truth(tree[1], item, request) or _truth(tree[2], item, request)
    if operator == "and":
        return _truth(tree[1], item, request) and _truth(tree[2], item, request)
    if operator == "not":
        return not _truth(tree[1], item, request)
    if operator == "compare":
        return _compare(tree[1], _resolve(tree[2], item, request), _resolve(tree[3], item, request))
    if operator == "in":
        left = _resolve(tree[1], item, request)
        return any(_compare("=", left, _resolve(choice, item, request)) for choice in tree[2])
    function, *arguments = tree[1:]
    if function in ("attribute_exists", "attribute_not_exists"):
        if arguments[0][0] != "path":
            raise _validation(f"Invalid ConditionExpression: {function} needs a document path")
        return (_resolve(arguments[0], item, request) is not None) == (function == "attribute_exists")
    subject, operand = (_resolve(a, item, request) for a in arguments)
    if subject is None or operand is None:
        return False
    if function == "begins_with":
        return "S" in subject and "S" in operand and subject["S"].startswith(operand["S"])
    if "S" in subject and "S" in operand:  # contains on a string
        return operand["S"] in subject["S"]
    kind = next(iter(subject))
    return kind in ("SS", "NS") and _scalar(operand) in {_scalar({kind[0]: v}) for v in subject[kind]}


def _scalar(value: dict[str, Any]) -> Any:
    ((kind, content),) = value.items()
    if kind == "N":
        return Decimal(content)
    if kind in ("SS",):
        return frozenset(content)
    if kind == "NS":
        return frozenset(Decimal(v) for v in content)
    return (kind, json.dumps(content, sort_keys=True))


def _compare(operator: str, left: dict[str, Any] | None, right: dict[str, Any] | None) -> bool:
    """A missing attribute, or two values of different types, compare false (never an error)."""
    if left is None or right is None or next(iter(left)) != next(iter(right)):
        return operator == "<>" and left is not None and right is not None
    a, b = _scalar(left), _scalar(right)
    if operator in ("=", "<>"):
        return (a == b) == (operator == "=")
    if next(iter(left)) not in ("S", "N"):
        raise _validation(
            f"Invalid ConditionExpression: Incorrect operand type for operator or function; operator: {operator}"
        )
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[operator]


def _number(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


@lru_cache(maxsize=512)
def _update_clauses(expression: str) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """``SET a = :v, b = :w REMOVE c ADD d :x DELETE e :y`` -> ((clause, actions), ...); each
    clause at most once."""
    clauses, current, seen = [], None, set()
    for token in _tokens(expression):
        if token.upper() in ("SET", "REMOVE", "ADD", "DELETE"):
            if token.upper() in seen:
                raise _validation(
                    f'Invalid UpdateExpression: The "{token.upper()}" section can only be used once in an update expression'
                )
            seen.add(token.upper())
            current = (token.upper(), [[]])
            clauses.append(current)
        elif current is None:
            raise _validation(f"Invalid UpdateExpression: unexpected {token}")
        elif token == ",":
            current[1].append([])
        else:
            current[1][-1].append(token)
    return tuple((clause, tuple(tuple(action) for action in actions)) for clause, actions in clauses)


def _apply_update(expression: str, item: Item, request: dict[str, Any], key_name: str) -> None:
    for clause, actions in _update_clauses(expression):
        for action in actions:
            if not action or not (action[0].startswith("#") or action[0][0].isalpha()):
                raise _validation(f"Invalid UpdateExpression: Syntax error in {clause}")
            name = _name(action[0], request)
            if name == key_name:
                raise _validation(
                    f"One or more parameter values were invalid: Cannot update attribute {name}. This attribute is part of the key"
                )
            if clause == "REMOVE" and len(action) == 1:
                item.pop(name, None)
            elif clause == "SET" and len(action) == 3 and action[1] == "=":
                value = _resolve(
                    ("value", action[2]) if action[2].startswith(":") else ("path", action[2]), item, request
                )
                if value is None:
                    raise _validation("The provided expression refers to an attribute that does not exist in the item")
                item[name] = _copy(value)
            elif clause in ("ADD", "DELETE") and len(action) == 2 and action[1].startswith(":"):
                _add_or_delete(clause, item, name, request["ExpressionAttributeValues"][action[1]])
            else:
                raise NotImplementedError(
                    f"the DynamoDB model does not implement the {clause} action {' '.join(action)!r}"
                )


def _add_or_delete(clause: str, item: Item, name: str, value: dict[str, Any]) -> None:
    """ADD: a number is added to (or becomes) the attribute; a set is merged into it. DELETE: the
    elements are taken out of a set, and an empty set is removed (sets cannot be empty)."""
    ((kind, content),) = value.items()
    current = item.get(name)
    if clause == "ADD" and kind == "N":
        if current is not None and "N" not in current:
            raise _validation("An operand in the update expression has an incorrect data type")
        item[name] = {"N": _number(Decimal(current["N"] if current else "0") + Decimal(content))}
        return
    if kind not in ("SS", "NS"):
        raise _validation(
            f"Invalid UpdateExpression: Incorrect operand type for operator or function; operator: {clause}, operand type: {kind}"
        )
    if current is not None and kind not in current:
        raise _validation("An operand in the update expression has an incorrect data type")
    have = list(current[kind]) if current else []
    if clause == "ADD":
        merged = have + [v for v in content if v not in have]
        item[name] = {kind: merged}
    elif current is not None:
        left = [v for v in have if v not in content]
        if left:
            item[name] = {kind: left}
        else:
            del item[name]
