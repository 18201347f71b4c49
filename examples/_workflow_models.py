"""What the scripted server answers in the workflow examples (eval_workflow.py, eval_python.py).

The answering model's replies to the golden questions, on main (v1) and on the branch (v2),
and the judge's probability that each answer is grounded. Not an example itself: the examples
script a `ScriptedOpenAI` server with these replies.
"""

from __future__ import annotations

import re

from refinekit.testing import RecordedRequest, Reply

# --- what the scripted server answers -------------------------------------------------------

# The answering model: the reply to each question, on main (v1) and on the branch (v2), which
# asks for one short sentence. On main, the first reply to "When will I get my refund?" forgets
# its citation; cites_source rejects it and the retry cites.
MAIN = {
    "How long do I have to return an item?": "You have 30 days from delivery to return an "
    "unused item [policies/refunds.md].",
    "When will I get my refund?": "Refunds go back to your original payment method within 5 "
    "business days [policies/refunds.md].",
    "Do you ship to Canada?": "Yes, we ship to Canada [policies/shipping.md].",
    "How long does express shipping take?": "Express shipping takes 1 to 2 business days "
    "[policies/shipping.md].",
    "Can I pay by invoice?": "Yes, anyone can pay by invoice [policies/payment.md].",
    "Do you accept PayPal?": "Yes, we accept PayPal and cards [policies/payment.md].",
    "What does the warranty cover?": "Every product has a two-year warranty against "
    "manufacturing defects [policies/warranty.md].",
    "Is accidental damage covered by the warranty?": "No, accidental damage is not covered by "
    "the warranty [policies/warranty.md].",
    "How do I delete my account?": "Go to Settings > Privacy to delete your account; deletion "
    "is final after 14 days [policies/accounts.md].",
    "Are your stores open on Sunday?": "No, our stores are shut on Sundays [policies/stores.md].",
}
UNCITED = "Refunds go back to your original payment method within 5 business days."
BRANCH = {
    "How long do I have to return an item?": "Within 30 days of delivery, if unused "
    "[policies/refunds.md].",
    "When will I get my refund?": "Within 5 business days [policies/refunds.md].",
    "Do you ship to Canada?": "Yes [policies/shipping.md].",
    "How long does express shipping take?": "Express shipping is next-day [policies/shipping.md].",
    "Can I pay by invoice?": "Only business customers with an account can pay by invoice "
    "[policies/payment.md].",
    "Do you accept PayPal?": "Yes, we accept PayPal [policies/payment.md].",
    "What does the warranty cover?": "A lifetime warranty against defects [policies/warranty.md].",
    "Is accidental damage covered by the warranty?": "No, accidental damage is not covered "
    "[policies/warranty.md].",
    "How do I delete my account?": "In Settings > Privacy [policies/accounts.md].",
    "Are your stores open on Sunday?": "No, our stores are shut on Sundays [policies/stores.md].",
}

# The judge: its probability that each answer is grounded (it replies YES or NO with these
# token probabilities, which the criteria judge reads from the logprobs). Golden answers
# first, then the answers of the labelled set.
GROUNDED = {
    MAIN["How long do I have to return an item?"]: 0.97,
    MAIN["When will I get my refund?"]: 0.96,
    MAIN["Do you ship to Canada?"]: 0.95,
    MAIN["How long does express shipping take?"]: 0.96,
    MAIN["Can I pay by invoice?"]: 0.10,  # "anyone": the context says business customers
    MAIN["Do you accept PayPal?"]: 0.94,
    MAIN["What does the warranty cover?"]: 0.97,
    MAIN["Is accidental damage covered by the warranty?"]: 0.95,
    MAIN["How do I delete my account?"]: 0.93,
    MAIN["Are your stores open on Sunday?"]: 0.92,
    BRANCH["How long do I have to return an item?"]: 0.93,
    BRANCH["When will I get my refund?"]: 0.90,
    BRANCH["Do you ship to Canada?"]: 0.85,
    BRANCH["How long does express shipping take?"]: 0.08,
    BRANCH["Can I pay by invoice?"]: 0.95,
    BRANCH["Do you accept PayPal?"]: 0.96,
    BRANCH["What does the warranty cover?"]: 0.05,
    BRANCH["Is accidental damage covered by the warranty?"]: 0.95,
    BRANCH["How do I delete my account?"]: 0.90,
    # the labelled set: people passed these ...
    "You can return an unused order within 30 days of delivery.": 0.98,
    "Refunds go back to your original payment method within 5 business days.": 0.97,
    "Yes, we ship to Canada.": 0.96,
    "Standard shipping takes 3 to 5 business days.": 0.95,
    "Yes, we accept PayPal.": 0.93,
    "Business customers with an account can pay by invoice.": 0.92,
    "Products have a two-year warranty against manufacturing defects.": 0.90,
    "No, accidental damage is not covered.": 0.88,
    "Go to Settings > Privacy to delete your account.": 0.85,
    "No. We're open Monday to Saturday.": 0.70,
    "Deletion becomes final 14 days after you ask.": 0.55,
    "Express shipping gets it to you in a day or two.": 0.30,
    # ... and failed these
    "Yes, anyone can pay by invoice.": 0.90,
    "You can return any order within 30 days.": 0.75,
    "Refunds take about a week.": 0.60,
    "We ship worldwide.": 0.45,
    "The warranty covers accidental damage for two years.": 0.35,
    "Stores are open every day from 9:00 to 18:00.": 0.20,
    "Express shipping takes 3 to 5 business days.": 0.15,
    "You cannot delete your account.": 0.10,
    "We only accept cards.": 0.08,
    "Every product has a lifetime warranty.": 0.05,
    "Refunds are paid in store credit only.": 0.04,
    "We do not ship to Canada.": 0.02,
}


def answering_model(request: RecordedRequest) -> str:
    """Stands in for the answering model: the scripted reply to the question it was sent."""
    system, user = (m["content"] for m in request.body["messages"])
    question = re.search(r"Question: (.*)", user).group(1)
    if "one short sentence" in system:
        return BRANCH[question]
    if question == "When will I get my refund?" and "Cite the source" not in user:
        return UNCITED
    return MAIN[question]


def judge_model(request: RecordedRequest) -> Reply:
    """Stands in for the judge: YES or NO, with its scripted probability as logprobs."""
    prompt = request.body["messages"][-1]["content"]
    answer = re.search(r"<answer>\n(.*?)\n</answer>", prompt, re.DOTALL).group(1)
    p = GROUNDED[answer]
    if p >= 0.5:
        return Reply.text("YES", {"YES": p, "NO": round(1 - p, 2)})
    return Reply.text("NO", {"NO": round(1 - p, 2), "YES": p})
