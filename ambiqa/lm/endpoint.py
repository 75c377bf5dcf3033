"""The endpoint engine: any LiteLLM / OpenAI-compatible model through an inner ``dspy.LM``.

The API key is read from an environment variable, never from the command line or an
artifact; retries and deadlines belong to :class:`ambiqa.lm.resilience.ResilientEngine`.
"""

from __future__ import annotations

from typing import Any


class EndpointEngine:
    """Sends a canonical request through an inner ``dspy.LM`` (LiteLLM or DSPy's native HTTP
    client) with DSPy's retries off, so :class:`ResilientEngine` owns retries and deadlines.

    The inner call runs with no callbacks and no usage tracker: the outer ``dspy.LM`` reports
    the call once to ambiqa's tracing. The key lives only in the inner LM; ``dump_state``
    records the environment variable's name, never its value.
    """

    def __init__(self, model: str, *, api_base: str | None, api_key_env: str | None,
                 api_key: str | None, timeout: float, max_tokens: int,
                 temperature: float) -> None:
        import dspy

        self.model = model
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        kwargs: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens,
                                  "cache": False, "num_retries": 0, "timeout": timeout}
        if api_base:
            kwargs["api_base"] = api_base
        if api_key:
            kwargs["api_key"] = api_key
        self._lm = dspy.LM(model, **kwargs)

    @property
    def supports_response_schema(self) -> bool:
        return bool(self._lm.supports_response_schema)

    @property
    def supported_params(self) -> frozenset:
        return frozenset(self._lm.supported_params)

    def complete(self, request: Any) -> Any:
        import dspy

        with dspy.context(callbacks=[], usage_tracker=None):
            response = self._lm(request)
        check_completion(response, self.model)
        return response

    def close(self) -> None:
        self._lm.close()

    def dump_state(self) -> dict[str, Any]:
        return {"model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env,
                "timeout": self.timeout, "max_tokens": self.max_tokens,
                "temperature": self.temperature}


def check_completion(response: Any, model: str) -> None:
    """Refuse a 200 reply that is not a completion: an OpenAI-style body with no ``choices``.

    The HTTP client maps it to an empty text, which the adapter would report as a reply that
    does not parse, and the step would degrade; but nothing was generated, so it is a
    transport failure (a gateway or a server fault), raised as a retryable server error.
    A completion whose content is empty is the model's reply and stays a parse failure.
    """
    from dspy import lm15

    data = getattr(response, "provider_data", None)
    if isinstance(data, dict) and "choices" in data and not data["choices"]:
        raise lm15.ServerError(f"{model}: the reply has no choices (an empty completion body)")
