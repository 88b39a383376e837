"""Bring your own agent: run OpenAI Agents SDK and Pydantic AI agents durably on Stint.

Each adapter plugs into its framework's own extension points (a model, tool
wrappers, approvals) so that every model call is Stint's durable model step
(``stint.agents.model_step``) and every function tool a durable tool step;
the framework's loop itself runs unchanged. Import the adapter you use:
``stint.adapters.openai_agents`` (extra ``[openai-agents]``) or
``stint.adapters.pydantic_ai`` (extra ``[pydantic-ai]``). Importing this
package loads neither framework.
"""

from __future__ import annotations

__all__: list[str] = []
