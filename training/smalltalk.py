"""Turns that need no tool (training phrasings): greetings, thanks, goodbyes, questions about the
assistant, chat that mentions places or restaurants, and requests outside its tools.

``KINDS`` maps a kind to (user bodies, assistant replies).  Bodies may carry ``{city}`` or
``{restaurant}``; chat about a place is still chat, never a tool call.
"""

from __future__ import annotations

CAPABILITIES = "I can check the weather, book restaurants, tell the time, calculate and search the web."
KINDS: dict[str, tuple[list[str], list[str]]] = {
    "greet": (["hello", "hi", "hi there", "hey", "good morning", "good evening", "good afternoon", "hey there",
               "hiya", "howdy", "yo", "greetings", "morning"],
              ["Hello! How can I help you today?", "Hi! What can I do for you?", "Hey! What can I do for you?"]),
    "how": (["how are you", "how's it going", "how are you doing", "what's up", "how do you do", "how are things",
             "are you there", "you ok"],
            ["I'm doing well, thanks! What can I do for you?", "All good here! How can I help?"]),
    "thanks": (["thanks", "thank you", "thanks a lot", "thank you so much", "great, thanks", "perfect, thank you",
                "cheers", "thx", "ty", "much appreciated", "awesome, thanks", "that's great, thanks",
                "thanks for the forecast", "thanks for booking that", "thanks for checking", "nice, thank you",
                "thanks, that helps", "cool, thanks for the help", "thanks for the weather update",
                "great, see you at {restaurant}", "thanks, {city} sounds nice", "the booking went fine, thanks",
                "the reservation worked, thank you", "the table at {restaurant} was perfect, thanks",
                "the forecast was right, thanks", "thanks for the math", "cool, thanks for searching",
                "that time zone tip helped a lot", "great, I'll bring an umbrella", "perfect, I'll be there at 8",
                "thanks, the answer about {city} was useful", "wonderful, dinner at {restaurant} it is"],
               ["You're welcome!", "Happy to help!", "Anytime!", "You're welcome! Anything else?"]),
    "bye": (["bye", "goodbye", "see you", "see you later", "that's all for now", "good night", "talk to you later",
             "that's all, bye", "I'm done", "nothing else, thanks", "no, that's it"],
            ["Goodbye! Have a nice day.", "Bye! Have a great day."]),
    "who": (["who are you", "what are you", "what can you do", "what can you help with", "what tools do you have",
             "what are you able to do", "help", "what do you do", "what are your skills", "how can you help me",
             "are you a robot", "what's your name", "what else can you do", "what are you good at",
             "tell me about yourself", "what kind of things do you help with", "do you have any tools",
             "can you help me", "are you an AI", "what should I ask you"],
            ["I'm a small demo assistant. " + CAPABILITIES]),
    "ack": (["ok", "okay", "cool", "nice", "got it", "great", "sounds good", "alright", "perfect", "wow", "awesome",
             "I see", "good to know", "interesting", "hmm", "fine"],
            ["Great! Anything else?", "Let me know if you need anything else.", "Glad I could help!"]),
    "chat": (["I visited {city} last year", "my sister lives in {city}", "I love the food at {restaurant}",
              "I'm from {city}", "{city} is beautiful", "I had dinner at {restaurant} yesterday",
              "I used to live in {city}", "the weather was great in {city} last week", "I'm flying to {city} soon",
              "{restaurant} was amazing last time", "I miss {city}", "my favourite city is {city}",
              "it was raining all day yesterday", "I'm hungry", "I'm bored", "it's so cold today",
              "I ate too much at {restaurant}", "{city} is too hot in summer", "I love sunny days",
             "the weather in {city} was awful last week", "I got soaked in the rain yesterday",
             "my train leaves at 19:00", "I'm turning 40 tomorrow", "I have 3 kids", "my plane to {city} leaves at 7pm",
             "we had a great time at {restaurant}", "I booked {restaurant} myself last week",
             "it's snowing in {city} again, my friend says", "math was never my thing", "I searched for hours yesterday",
             "my watch is five minutes late", "the time difference to {city} is killing me",
             "my brother moved to {city}", "we're {n} people in my family", "I'm waiting for a table at {restaurant}",
             "I'm tired", "I'm happy today", "I'm a bit sad", "I'm so busy this week", "I'm excited", "I'm stressed",
             "what a day", "long day at work", "I just woke up", "I can't sleep", "it's my birthday",
             "I finished my exams", "my cat is sleeping", "I love pizza", "coffee is life", "Mondays are hard",
             "the food at {restaurant} made me sick", "I'll visit {city} in summer", "you're funny"],
             ["That sounds lovely! Is there anything I can help you with?", "Nice! Can I help you with anything?"]),
    "decline": (["no thanks", "not now", "maybe later", "never mind", "forget it", "nope", "that's ok",
                 "no need", "not today", "I'll do it later"],
                ["Alright! Let me know if you need anything.", "No problem!"]),
    "other": (["tell me a joke", "write a poem about {city}", "what's the meaning of life", "can you sing",
               "translate hello into French", "what's your favourite colour", "do you like {city}",
               "recommend a movie", "write me a story", "what do you think about {city}", "are you smart",
               "can you drive me to {restaurant}", "order me a pizza", "call my mom", "set an alarm for 7",
               "play some music", "send an email to Bob"],
              ["Sorry, I can't help with that. " + CAPABILITIES]),
}
ENDINGS = ["", ".", "!", "!!", " :)", "?", ".."]
