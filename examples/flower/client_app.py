"""The ClientApp: plain Flower training and evaluation on an MNIST shard, with `StarfishMod`
(the one Starfish line); its evaluate function also answers the federated evaluation of
every unlearning job. The mod reads the parties and this node's credential from the run and
node config when a message arrives (`starfish_flower.app_config`)."""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from mnist_app import evaluate, train

from starfish_flower import StarfishMod, keys, request_unlearning

app = ClientApp(mods=[StarfishMod()])  # Starfish
app.evaluate()(evaluate)


@app.train()
def handle_train(msg: Message, context: Context) -> Message:
    reply = train(msg, context)
    asking = int(context.run_config["unlearn-me-partition"])
    if asking == int(context.node_config["partition-id"]) >= 0:
        starfish_round = int(msg.content["config"].get(keys.ROUND, 0))
        if starfish_round >= int(context.run_config["unlearn-me-round"]):
            request_unlearning(reply)  # Starfish: forget me (the operator's parameters)
    return reply
