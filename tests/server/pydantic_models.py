"""20 Pydantic models with constrained fields, as users declare tool arguments and answers: bounds,
exclusive bounds, lengths, regexes, emails, UUIDs, datetimes, enums and literals, unions,
optional and nested models, lists, tuples and a recursive model. Pydantic 1.10 (Debian 12's
python3-pydantic) writes their schemas with definitions and $refs; every string is bounded, so a
random model closes it."""
from datetime import date, datetime
from enum import Enum
from typing import Literal, Optional, Tuple, Union
from uuid import UUID

from pydantic import BaseModel, EmailStr, confloat, conint, conlist, constr

Word = constr(regex=r"^[a-z]{1,8}$")


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    city: constr(min_length=1, max_length=10)
    zip: constr(regex=r"^\d{5}$")


class Inner(BaseModel):
    level: conint(ge=1, le=5)
    label: Word


class Circle(BaseModel):
    kind: Literal["circle"]
    r: conint(ge=1, le=9)


class Square(BaseModel):
    kind: Literal["square"]
    side: conint(ge=1, le=9)


class Node(BaseModel):
    value: conint(ge=0, le=9)
    child: Optional["Node"]


Node.update_forward_refs()


class Person(BaseModel):
    name: constr(min_length=1, max_length=12)
    age: conint(ge=0, le=130)


class Ratio(BaseModel):
    value: confloat(gt=0, lt=1)
    weight: confloat(ge=-5.5, le=5.5)


class Counter(BaseModel):
    count: conint(gt=0, lt=1000)
    delta: conint(ge=-50, lt=-3)


class Contact(BaseModel):
    email: EmailStr
    name: Word


class Ident(BaseModel):
    id: UUID
    parent: Optional[UUID]


class Event(BaseModel):
    at: datetime
    day: date


class Paint(BaseModel):
    color: Color
    shade: Literal["light", "dark"]


class WithAddress(BaseModel):
    address: Address
    previous: Optional[Address]


class Tagged(BaseModel):
    tags: conlist(Word, min_items=1, max_items=4)


class Grid(BaseModel):
    rows: conlist(conlist(conint(ge=0, le=9), min_items=1, max_items=3), min_items=1, max_items=3)


class Measure(BaseModel):
    value: Union[conint(ge=0, le=99), bool]


class Shape(BaseModel):
    shape: Union[Circle, Square]


class Point(BaseModel):
    xy: Tuple[conint(ge=-9, le=9), conint(ge=-9, le=9)]


class Flags(BaseModel):
    ok: bool
    maybe: Optional[bool]


class Version(BaseModel):
    v: constr(regex=r"^v\d{1,2}\.\d{1,2}$")


class Sku(BaseModel):
    sku: constr(regex=r"^[A-Z]{3}-\d{4}$")


class Nested(BaseModel):
    inner: Inner
    more: conlist(Inner, max_items=2)


class Tree(BaseModel):
    root: Node


class Money(BaseModel):
    amount: confloat(ge=0, le=1000)
    currency: Literal["USD", "EUR"]


class Mixed(BaseModel):
    id: UUID
    email: EmailStr
    when: datetime
    level: conint(ge=1, le=5)
    colors: conlist(Color, max_items=2)
    parts: conlist(Inner, max_items=2) = []


MODELS = {model.__name__: model for model in (Person, Ratio, Counter, Contact, Ident, Event, Paint, WithAddress, Tagged,
                                              Grid, Measure, Shape, Point, Flags, Version, Sku, Nested, Tree, Money, Mixed)}
assert len(MODELS) == 20
