"""The base of the option models: one field per option, read from Spark or from a job file.

An option is a field of an :class:`OptionsModel` (pydantic v2). Its Python name is the job
file key (``max_messages_per_trigger``), its Spark option (``maxMessagesPerTrigger``) is the
field's ``json_schema_extra["option"]`` (not a pydantic alias: job files keep their keys, and
a job dumps by its own names), its ``description`` the line the docs show, and its type one of
the annotated types below, whose validators take a value in either form: the text Spark
hands over (``"1000"``, ``"true"``, ``"15m"``) or a typed YAML scalar. The value grammar is
:mod:`pipelines.options.grammar`'s; a problem is raised with :func:`problem`, a pydantic
error that carries the message and where it belongs (the job loader prints it as
``file: key.path: message``). A field without a Spark alias is the job file's alone; a
nested model whose alias ends with ``.`` (``pulsar.client.``) holds the options under
that prefix.

:meth:`OptionsModel.from_spark` reads a Spark option map (names matched case-insensitively,
as Spark does; another connector's name is taken, ignored or refused as
:mod:`pipelines.options.migration` says; any other unknown name is refused with a "did you
mean" hint) and turns the first
problem into an :class:`~pipelines.errors.OptionError` naming the option;
:meth:`OptionsModel.spark_options` writes the options a model was given back as Spark's
strings. Validators that word a message by field use :func:`label`, which gives the Spark
name when validating Spark options and the job key otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError, PydanticUndefined

from pipelines.errors import OptionError
from pipelines.options.grammar import (
    GrammarError,
    boolean,
    duration_ms,
    integer,
    kind_of,
    offsets_spec,
    show,
    time_ms,
)
from pipelines.options.migration import resolve
from pipelines.suggest import did_you_mean

T = TypeVar("T")

#: a path below the validated value: keys and list indexes
Loc = tuple[str | int, ...]


# -- problems ----------------------------------------------------------------------------------
def problem(message: str, at: Loc | str = ()) -> PydanticCustomError:
    """A validation error with ``message``, located ``at`` (a key or path) below the validated value."""
    where = (at,) if isinstance(at, str) else tuple(at)
    return PydanticCustomError("job", "{message}", {"message": message, "problems": [(where, message)]})


def problems(found: list[tuple[Loc, str]]) -> PydanticCustomError:
    """Several problems of one model at once (``found``: relative path, message)."""
    return PydanticCustomError(
        "job", "{message}", {"message": "; ".join(m for _, m in found), "problems": found}
    )


def grammar_value(parse: Callable[[Any], T], value: Any) -> T:
    """``parse(value)`` with a :class:`~pipelines.options.grammar.GrammarError` raised as problems."""
    try:
        return parse(value)
    except GrammarError as exc:
        found: list[tuple[Loc, str]] = [(key, message) for key, message in exc.problems]
        raise problems(found) from None


def is_spark(info: ValidationInfo) -> bool:
    """True while validating a Spark option map (:meth:`OptionsModel.from_spark`)."""
    return bool(info.context and info.context.get("spark"))


def context(info: ValidationInfo, key: str) -> Any:
    """A value of the validation context (None when absent)."""
    return info.context.get(key) if info.context else None


# -- value types -----------------------------------------------------------------------------
def _text(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise problem("must not be empty")
    return value


def _flag(value: Any) -> Any:
    return grammar_value(boolean, value) if isinstance(value, str) else value


def _int(minimum: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise problem(f"expected an integer, got {kind_of(value)}")
        if isinstance(value, str):
            return grammar_value(lambda v: integer(v, minimum), value)
        if isinstance(value, int) and value < minimum:
            raise problem(f"must be >= {minimum}, got {value}")
        return value

    return check


def _positive_number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise problem(f"expected a number, got {kind_of(value)}")
    try:
        number = float(value)
    except ValueError:
        raise problem(f"expected a number, got {show(value)}") from None
    if number <= 0:
        raise problem(f"must be > 0, got {show(value)}")
    return number


def _duration(value: Any) -> Any:
    if isinstance(value, int | str) and not isinstance(value, bool):
        grammar_value(duration_ms, value)
        return str(value).strip()
    return value


def _time(value: Any) -> Any:
    return grammar_value(time_ms, value)


def offsets_value(value: Any) -> Any:
    """``earliest``, ``latest`` or topic-partition → position text (``grammar.offsets_spec``)."""
    spec = grammar_value(offsets_spec, value)
    return spec if isinstance(spec, str) else {k: str(v) for k, v in spec.items()}


def _topic_list(value: Any) -> Any:
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    return value


def _secret(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise problem("must not be empty")
    return value


def choice(*words: str) -> BeforeValidator:
    """One of ``words`` in any case, given back in its own spelling; otherwise a problem with a hint."""
    canonical = {w.lower(): w for w in words}

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        word = canonical.get(value.strip().lower())
        if word is not None:
            return word
        hint = did_you_mean(value.strip(), words)
        raise problem(f"expected one of {', '.join(words)}, got {show(value)}{hint}")

    return BeforeValidator(check)


Text = Annotated[str, BeforeValidator(_text)]
Flag = Annotated[bool, BeforeValidator(_flag)]
PosInt = Annotated[int, BeforeValidator(_int(1))]
NonNegInt = Annotated[int, BeforeValidator(_int(0))]
PosNumber = Annotated[float, BeforeValidator(_positive_number)]
Duration = Annotated[str, BeforeValidator(_duration)]
TimeMs = Annotated[int, BeforeValidator(_time)]
Offsets = Annotated[str | dict[str, str], BeforeValidator(offsets_value)]
TopicList = Annotated[list[Text], BeforeValidator(_topic_list)]
Secret = Annotated[SecretStr, BeforeValidator(_secret)]


# -- the model -------------------------------------------------------------------------------
def option(default: Any = PydanticUndefined, *, spark: str, doc: str, **more: Any) -> Any:
    """A field for the Spark option ``spark`` (a prefix when it ends with ``.``) documented by ``doc``."""
    return Field(default, json_schema_extra={"option": spark}, description=doc, **more)


def spark_text(value: Any) -> str:
    """A typed option value as the string Spark passes."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class OptionsModel(BaseModel):
    """Options of the ``pulsarwire`` source or sink (see the module docstring)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,
        hide_input_in_errors=True,
    )

    #: what an unknown Spark option is (message of its OptionError)
    UNKNOWN: ClassVar[str] = "unknown option for format('pulsarwire')"
    #: Spark options (lower case) that Spark itself adds and the model ignores
    IGNORED: ClassVar[frozenset[str]] = frozenset()
    #: the side whose other connectors' names :mod:`pipelines.options.migration` knows ("": none)
    SIDE: ClassVar[Literal["source", "sink", ""]] = ""

    @classmethod
    def spark_names(cls) -> dict[str, str]:
        """Field name → Spark option, for the fields Spark sets (a nested model: its prefix)."""
        out: dict[str, str] = {}
        for name, f in cls.model_fields.items():
            extra = f.json_schema_extra
            if isinstance(extra, dict) and isinstance(extra.get("option"), str):
                out[name] = str(extra["option"])
        return out

    @classmethod
    def _nested(cls, name: str) -> type[OptionsModel] | None:
        annotation = cls.model_fields[name].annotation
        for arg in getattr(annotation, "__args__", (annotation,)):
            if isinstance(arg, type) and issubclass(arg, OptionsModel):
                return arg
        return None

    @classmethod
    def spark_label(cls, name: str) -> str:
        """The Spark option of field ``name`` (the name itself when it has none)."""
        return cls.spark_names().get(name, name)

    @classmethod
    def unknown(cls, key: str) -> OptionError:
        """The error for an unknown Spark option ``key``."""
        known = [a for a in cls.spark_names().values() if not a.endswith(".")]
        return OptionError(key, cls.UNKNOWN + did_you_mean(key, known))

    @classmethod
    def spark_data(cls, options: Mapping[str, str], prefix: str = "") -> dict[str, Any]:
        """The Spark option map as this model's input: keys matched without case, nested by prefix.

        ``prefix`` is the nested model's (for messages). Raises OptionError for an unknown option.
        """
        plain: dict[str, str] = {}
        prefixes: dict[str, str] = {}
        for name, alias in cls.spark_names().items():
            if alias.endswith("."):
                prefixes[alias.lower()] = name
            else:
                plain[alias.lower()] = name
        data: dict[str, Any] = {}
        nested: dict[str, dict[str, str]] = {}
        for key, value in options.items():
            low = key.lower()
            under = next((p for p in prefixes if low.startswith(p)), None)
            if under is not None:
                nested.setdefault(prefixes[under], {})[key[len(under) :]] = value
            elif low in plain:
                name = plain[low]
                f = cls.model_fields[name]
                data[f.validation_alias if isinstance(f.validation_alias, str) else name] = value
            elif low not in cls.IGNORED:
                use, what, label = (
                    resolve(key, cls.SIDE, frozenset(plain)) if cls.SIDE else ("refuse", "", key)
                )
                if use == "rename":  # another connector's name for one of ours
                    if any(k.lower() == what.lower() for k in options):
                        raise OptionError(
                            prefix + label, f"give {label} or {what}, not both (the same option)"
                        )
                    name = plain[what.lower()]
                    f = cls.model_fields[name]
                    data[f.validation_alias if isinstance(f.validation_alias, str) else name] = value
                elif use == "refuse":
                    raise OptionError(prefix + label, what) if what else cls.unknown(prefix + key)
        for name, sub in nested.items():
            model = cls._nested(name)
            assert model is not None
            data[name] = model.spark_data(sub, prefix + cls.spark_names()[name])
        return data

    @classmethod
    def from_spark(cls, options: Mapping[str, str], **ctx: Any) -> Self:
        """Validate a Spark option map; ``ctx`` is handed to the validators (e.g. ``streaming``).

        Raises OptionError naming the (first) offending option.
        """
        data = cls.spark_data(options)
        try:
            return cls.model_validate(data, context={"spark": True, **ctx})
        except ValidationError as exc:
            raise cls._option_error(exc) from None

    @classmethod
    def _option_error(cls, exc: ValidationError) -> OptionError:
        err = exc.errors()[0]
        loc: Loc = tuple(err["loc"])
        found = (err.get("ctx") or {}).get("problems") if err["type"] == "job" else None
        if found:
            where, message = found[0]
            loc = (*loc, *where)
        else:
            plain = {"missing": "required", "too_short": "must not be empty"}
            message = plain.get(err["type"], str(err["msg"]))
        return OptionError(cls._spark_path(loc), message)

    @classmethod
    def _spark_path(cls, loc: Loc) -> str:
        """``("client", "auth_token")`` → ``pulsar.client.authToken``; keys below an option → ``[key]``."""
        model: type[OptionsModel] | None = cls
        out = ""
        for part in loc:
            if model is not None and isinstance(part, str):
                name = next(
                    (n for n, f in model.model_fields.items() if part in (n, f.validation_alias)), None
                )
                if name is not None:
                    out += model.spark_label(name)
                    model = model._nested(name)
                    continue
            model = None
            out += f"[{part}]"
        return out

    def spark_options(self) -> dict[str, str]:
        """The options this model was given (and that Spark knows), as Spark's strings."""
        out: dict[str, str] = {}
        names = self.spark_names()
        for name in type(self).model_fields:
            if name not in names or name not in self.model_fields_set:
                continue
            value = getattr(self, name)
            if value is None:
                continue
            alias = names[name]
            if isinstance(value, OptionsModel):
                out.update({alias + k: v for k, v in value.spark_options().items()})
            else:
                out[alias] = spark_text(value)
        return out


def label(info: ValidationInfo, model: type[OptionsModel], name: str) -> str:
    """Field ``name`` as the user wrote it: its Spark option for Spark, the job key otherwise."""
    return model.spark_label(name) if is_spark(info) else name
