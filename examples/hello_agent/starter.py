"""The starter: starts a task of the agent, answers its question to a person from the
keyboard (or ``--answer``), and prints the task's result.

    python starter.py "What does Temporal keep?"
    python starter.py "Who wrote this?" --answer "A person"
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from temporalio.client import Client

import agent
from agent_tasks.starter import AgentTasksPlugin, ConversationHistory, Settings, TaskStatus


async def main(question: str, answer: str | None, task: str) -> str:
    """Start the task, answer what it asks, print and return its result."""
    settings = Settings()
    client = await Client.connect(
        **settings.temporal.connect_config(), plugins=[AgentTasksPlugin()]
    )
    async with ConversationHistory(
        client, project_id="hello", agent_id="starter", task_queue=agent.TASK_QUEUE
    ) as history:
        await history.create_task(task, question, agent=agent.spec(question))
        while True:
            view = (await history.get_task(task)).view
            assert view is not None
            if view.status in (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED):
                break
            if view.pending_inputs:  # the agent asks a person (ctx.ask)
                prompt = view.pending_inputs[0].prompt
                if answer is None:
                    text = await asyncio.to_thread(input, f"{prompt}\n> ")
                else:
                    text = answer
                    print(f"{prompt}\n> {text}")
                await history.respond(task, text)
            await asyncio.sleep(0.2)
        final = await history.wait_task(task)
        assert final is not None
        result = final.result.text if final.result else final.error.text if final.error else ""
        print(f"task {task!r}: {final.status.value}\n{result}")
        return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--answer", help="the person's answer, if the agent asks (default: ask)")
    parser.add_argument("--task", default=f"hello-{uuid.uuid4().hex[:8]}", help="task name")
    args = parser.parse_args()
    asyncio.run(main(args.question, args.answer, args.task))
