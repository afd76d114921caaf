"""`?page=N&page_size=M` on every list: N from 1, M from 1 to 500 (50 when absent).

DRF's page-number pagination reads a `page_size` it cannot use (`null`, `-3`, `9999`) as the
default or the maximum and answers 200, and a malformed `page` as 404 "Invalid page.". Here a
value that is not such a number answers 400 naming the parameter, so a client learns that its
request was not what it meant; a page past the last one answers 404 naming `page`.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.paginator import InvalidPage
from django.db.models import QuerySet
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request

from hub.api.errors import ApiError

# Plain ASCII digits (int() would also take " 7", "+7" and other scripts' digits); 18 of them
# at most, so that no value overflows a 64-bit integer.
_NUMBER = re.compile(r"[0-9]{1,18}")


class Pagination(PageNumberPagination):
    """`?page=N&page_size=M` (N ≥ 1, 1 ≤ M ≤ 500); anything else is 400 naming the parameter."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def _number(self, request: Request, name: str, maximum: int | None) -> int | None:
        """The value of query parameter `name`: None when absent, else an integer from 1 to
        `maximum`, else 400 naming it."""
        raw = request.query_params.get(name)
        if raw is None:
            return None
        value = int(raw) if _NUMBER.fullmatch(raw) else 0
        if value < 1 or (maximum is not None and value > maximum):
            bound = f"from 1 to {maximum}" if maximum is not None else "of at least 1"
            shown = raw if len(raw) <= 40 else raw[:40] + "…"
            raise ApiError(
                [{"path": name, "message": f"{name} must be an integer {bound}, not {shown!r}"}]
            )
        return value

    def get_page_size(self, request: Request) -> int:
        size = self._number(request, self.page_size_query_param, self.max_page_size)
        return size if size is not None else self.page_size

    def paginate_queryset(
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any]:
        self.request = request
        page_size = self.get_page_size(request)
        number = self._number(request, self.page_query_param, None) or 1
        paginator = self.django_paginator_class(queryset, page_size)
        try:
            self.page = paginator.page(number)
        except InvalidPage:
            raise ApiError(
                [
                    {
                        "path": self.page_query_param,
                        "message": f"page {number} is past the last page ({paginator.num_pages})",
                    }
                ],
                status_code=404,
            ) from None
        return list(self.page)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.page_query_param,
                "required": False,
                "in": "query",
                "description": "The page, from 1; a page past the last one answers 404.",
                "schema": {"type": "integer", "minimum": 1, "maximum": 10**18 - 1},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Results per page, {self.page_size} when absent.",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]
